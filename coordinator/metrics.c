/*
 * coordinator/metrics.h: the exposition, table by table. A family is
 * written whole (HELP, TYPE, every sample) before the next one starts,
 * which is what the text format requires and what a parser checks.
 */
#include "coordinator/metrics.h"

#include "cluster/link.h"
#include "coordinator/fanout.h"
#include "selene/selene.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

/* The caller's buffer; the first overflow sticks. */
struct metrics_out {
	char *buf;
	size_t size, used;
	bool full;
};

static void put(struct metrics_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct metrics_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->used, o->size - o->used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->size - o->used)
		o->full = true;
	else
		o->used += (size_t)n;
}

static void family(struct metrics_out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled sample. */
static void single(struct metrics_out *o, const char *name, const char *type, const char *help,
		   uint64_t value)
{
	family(o, name, type, help);
	put(o, "%s %" PRIu64 "\n", name, value);
}

static void histogram(struct metrics_out *o, const char *kind,
		      const struct sel_latency_histogram *h)
{
	static const double bounds[SEL_LATENCY_BUCKETS] = SEL_LATENCY_BOUNDS;
	uint64_t cumulative = 0;

	for (uint32_t b = 0; b < SEL_LATENCY_BUCKETS; b++) {
		cumulative += h->counts[b];
		put(o, "selene_job_seconds_bucket{kind=\"%s\",le=\"%g\"} %" PRIu64 "\n", kind,
		    bounds[b], cumulative);
	}
	cumulative += h->counts[SEL_LATENCY_BUCKETS];
	put(o, "selene_job_seconds_bucket{kind=\"%s\",le=\"+Inf\"} %" PRIu64 "\n"
	    "selene_job_seconds_sum{kind=\"%s\"} %.6f\n"
	    "selene_job_seconds_count{kind=\"%s\"} %" PRIu64 "\n",
	    kind, cumulative, kind, h->sum_seconds, kind, h->count);
}

enum link_family { LINK_UP, LINK_QUEUED, LINK_FRAMES, LINK_QUEUE_FULL };

/* One link family's samples, for every peer in rank order. */
static void links(struct metrics_out *o, struct coord_fanout *fanout, uint32_t world_size,
		  enum link_family which)
{
	for (uint32_t r = 1; r < world_size; r++) {
		struct cluster_link_stats ls;
		bool alive;

		if (!coord_fanout_link_stats(fanout, r, &ls, &alive))
			break;
		switch (which) {
		case LINK_UP:
			put(o, "selene_link_up{rank=\"%u\"} %d\n", r, alive);
			break;
		case LINK_QUEUED:
			put(o, "selene_link_queued_bytes{rank=\"%u\"} %" PRIu64 "\n", r,
			    ls.queued_bytes);
			break;
		case LINK_FRAMES:
			put(o, "selene_link_frames_total{rank=\"%u\",direction=\"sent\"} %" PRIu64
			    "\nselene_link_frames_total{rank=\"%u\",direction=\"received\"} %"
			    PRIu64 "\n", r, ls.frames_sent, r, ls.frames_received);
			break;
		case LINK_QUEUE_FULL:
			put(o, "selene_link_queue_full_total{rank=\"%u\"} %" PRIu64 "\n", r,
			    ls.queue_full);
			break;
		}
	}
}

static void link_families(struct metrics_out *o, struct coord_fanout *fanout,
			  uint32_t world_size)
{
	family(o, "selene_link_up", "gauge", "Whether the link to a peer rank is up.");
	links(o, fanout, world_size, LINK_UP);
	family(o, "selene_link_queued_bytes", "gauge",
	       "Bytes in the writer queue of the link to a peer rank.");
	links(o, fanout, world_size, LINK_QUEUED);
	family(o, "selene_link_frames_total", "counter",
	       "Frames sent to and received from a peer rank.");
	links(o, fanout, world_size, LINK_FRAMES);
	family(o, "selene_link_queue_full_total", "counter",
	       "Sends to a peer rank refused because its queue was full.");
	links(o, fanout, world_size, LINK_QUEUE_FULL);
}

static void counters(struct metrics_out *o, const struct sel_stats *st)
{
	single(o, "selene_lookups_total", "counter", "Lookups answered.", st->lookups);
	single(o, "selene_hits_total", "counter", "Lookups that found a checkpoint.", st->hits);
	single(o, "selene_reused_tokens_total", "counter",
	       "Tokens covered by the checkpoints lookups found.", st->reused_tokens);
	family(o, "selene_publications_total", "counter", "Publications, by the store's answer.");
	put(o, "selene_publications_total{outcome=\"queued\"} %" PRIu64 "\n"
	    "selene_publications_total{outcome=\"present\"} %" PRIu64 "\n"
	    "selene_publications_total{outcome=\"retry\"} %" PRIu64 "\n"
	    "selene_publications_total{outcome=\"oversize\"} %" PRIu64 "\n",
	    st->published_queued, st->published_present, st->published_retry,
	    st->published_oversize);
	family(o, "selene_stores_total", "counter", "Store jobs finished on every rank, by result.");
	put(o, "selene_stores_total{result=\"ok\"} %" PRIu64 "\n"
	    "selene_stores_total{result=\"failed\"} %" PRIu64 "\n", st->stored, st->store_failures);
	single(o, "selene_fetches_total", "counter", "Restores completed on every rank.",
	       st->fetches);
	single(o, "selene_fetch_failures_total", "counter", "Restores that failed.",
	       st->fetch_failures);
	family(o, "selene_bytes_total", "counter",
	       "Record bytes stored (out of the GPU) and fetched (in), rank zero's share.");
	put(o, "selene_bytes_total{direction=\"out\"} %" PRIu64 "\n"
	    "selene_bytes_total{direction=\"in\"} %" PRIu64 "\n", st->bytes_stored,
	    st->bytes_fetched);
	single(o, "selene_evictions_total", "counter", "Records evicted to make room.",
	       st->evictions);
	single(o, "selene_truncations_total", "counter",
	       "Rows dropped (records compacted to their pages).", st->truncations);
	single(o, "selene_unlinks_total", "counter", "Record files removed on every rank.",
	       st->unlinks);
	family(o, "selene_records_dropped_total", "counter",
	       "Records a restore found bad on some rank, removed everywhere, by reason.");
	put(o, "selene_records_dropped_total{reason=\"checksum\"} %" PRIu64 "\n"
	    "selene_records_dropped_total{reason=\"header\"} %" PRIu64 "\n"
	    "selene_records_dropped_total{reason=\"missing\"} %" PRIu64 "\n",
	    st->records_dropped_checksum, st->records_dropped_header,
	    st->records_dropped_missing);
}

static void gauges(struct metrics_out *o, const struct sel_stats *st,
		   const struct coord_metrics_staging *staging)
{
	single(o, "selene_records", "gauge", "Records held (in the index, on every rank).",
	       st->records);
	single(o, "selene_disk_bytes", "gauge", "Bytes of record files charged to the disk budget.",
	       st->disk_bytes);
	single(o, "selene_disk_limit_bytes", "gauge", "The disk budget, the smallest of every rank.",
	       st->disk_limit_bytes);
	single(o, "selene_jobs_in_flight", "gauge", "Store and fetch jobs not yet completed.",
	       st->jobs_in_flight);
	single(o, "selene_warm_records", "gauge", "Records in every rank's warm tier.",
	       st->warm_records);
	single(o, "selene_warm_bytes", "gauge", "Bytes of warm slots those records hold, a rank's.",
	       st->warm_bytes);
	single(o, "selene_warm_slots_in_use", "gauge",
	       "Warm slots held by warm records and warm stores in flight, a rank's.",
	       st->warm_slots_used);
	single(o, "selene_warm_slots", "gauge", "Warm slots on each rank (0: no warm tier).",
	       st->warm_slots_total);
	single(o, "selene_warm_hits_total", "counter",
	       "Restores served from warm slots on every rank, reading no file.", st->warm_hits);
	single(o, "selene_warm_evictions_total", "counter",
	       "Records dropped from the warm tier to make room (their files stay).",
	       st->warm_evictions);
	single(o, "selene_warm_partial_hits_total", "counter",
	       "Restores that took some records from warm slots and read the rest from "
	       "their files.", st->warm_partial_hits);
	single(o, "selene_warm_read_throughs_total", "counter",
	       "Records a restore read from their files into warm slots on every rank, "
	       "which stayed warm.", st->warm_read_throughs);
	single(o, "selene_warm_read_through_bytes_total", "counter",
	       "Bytes of warm slots those read-throughs filled, a rank's.",
	       st->warm_read_through_bytes);
	single(o, "selene_warm_read_failures_total", "counter",
	       "Restores reading records into warm slots that failed on some rank (the "
	       "slots freed on every rank).", st->warm_read_failures);
	single(o, "selene_warm_dirty_records", "gauge",
	       "Warm records not yet on disk on every rank (a restart loses them).",
	       st->warm_dirty_records);
	single(o, "selene_warm_dirty_bytes", "gauge", "Bytes of their warm slots, a rank's.",
	       st->warm_dirty_bytes);
	single(o, "selene_warm_writes_total", "counter",
	       "Warm records' files written from their slots on every rank.", st->warm_writes);
	single(o, "selene_warm_spills_total", "counter",
	       "Of those, started because a store needed their slots.", st->warm_spills);
	single(o, "selene_warm_write_failures_total", "counter",
	       "Writes from warm that failed on some rank (the record stays dirty).",
	       st->warm_write_failures);
	single(o, "selene_warm_retry_dirty_total", "counter",
	       "Publications answered Retry because dirty records held the slots.",
	       st->warm_retry_dirty);
	single(o, "selene_warm_dirty_dropped_total", "counter",
	       "Dirty records dropped unwritten (condemned, or left at close).",
	       st->warm_dirty_dropped);
	single(o, "selene_expired_total", "counter",
	       "Records dropped from every tier by max-age expiry.", st->expired);
	single(o, "selene_warm_expired_total", "counter",
	       "Of those, records that were warm.", st->warm_expired);
	single(o, "selene_pool_attached", "gauge",
	       "1 while every rank is attached to the pool manager, else 0.", st->pool_attached);
	single(o, "selene_pool_puts_total", "counter",
	       "Records put to the pool as they left the local tiers, accepted with every "
	       "rank's share.", st->pool_puts);
	single(o, "selene_pool_put_failures_total", "counter",
	       "Puts refused or failed on some rank (the record dropped as without a pool).",
	       st->pool_put_failures);
	single(o, "selene_pool_hits_total", "counter", "Lookups answered from the pool.",
	       st->pool_hits);
	single(o, "selene_pool_claims_total", "counter",
	       "Restores claimed from the pool, completed on every rank.", st->pool_claims);
	single(o, "selene_pool_claim_bytes_total", "counter",
	       "Bytes those claims moved, a rank's.", st->pool_claim_bytes);
	single(o, "selene_pool_claim_failures_total", "counter",
	       "Claims that failed on some rank (the restore failed; nothing written is used).",
	       st->pool_claim_failures);
	single(o, "selene_pool_refusals_total", "counter",
	       "Refusals by the pool manager, of an attach, a put or a claim.",
	       st->pool_refusals);
	if (!staging)
		return;
	single(o, "selene_staging_slots", "gauge", "Staging slots in rank zero's pool.",
	       staging->slots_total);
	single(o, "selene_staging_slots_in_use", "gauge", "Staging slots taken by jobs now.",
	       staging->slots_in_use);
	single(o, "selene_staging_slots_intake", "gauge",
	       "Free staging slots held back for intake (fetch destinations).",
	       staging->slots_intake);
	single(o, "selene_staging_exhausted_total", "counter",
	       "Staging allocations refused for lack of free slots.", staging->exhausted);
	single(o, "selene_warm_store_fallbacks_total", "counter",
	       "Stores sent warm that rank zero's engine found no warm slots for and "
	       "staged (0 while the warm tier's count holds).",
	       staging->warm_fallbacks);
	single(o, "selene_warm_read_fallbacks_total", "counter",
	       "Records a restore was to read into warm slots that rank zero's engine "
	       "found no slots for and staged (0 while the warm tier's count holds).",
	       staging->warm_read_fallbacks);
	single(o, "selene_store_yields_total", "counter",
	       "Restores rank zero's engine ran inside a store: between its windows "
	       "or while it waited for the disk.",
	       staging->store_yields);
}

int coord_metrics_write(char *buf, size_t size, const struct sel_stats *st,
			const struct coord_metrics_staging *staging,
			struct coord_fanout *fanout, uint32_t world_size)
{
	struct metrics_out o = { .buf = buf, .size = size };

	if (size == 0)
		return -ENOSPC;
	buf[0] = '\0';
	family(&o, "selene_build_info", "gauge", "The library's version; always 1.");
	put(&o, "selene_build_info{version=\"%s\"} 1\n", sel_version());
	counters(&o, st);
	gauges(&o, st, staging);
	family(&o, "selene_job_seconds", "histogram",
	       "Store and fetch jobs, submission to completion on every rank.");
	histogram(&o, "store", &st->store_latency);
	histogram(&o, "fetch", &st->fetch_latency);
	if (fanout)
		link_families(&o, fanout, world_size);
	return o.full ? -ENOSPC : (int)o.used;
}
