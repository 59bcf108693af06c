/*
 * The public store API (include/selene/store.h) for a world of one rank:
 * opens the record directory, the device and the shard engine, rebuilds
 * the index from the startup scan, and hands every call to the policy in
 * store.c. A mutex makes stats and metrics safe from other threads; the
 * worker thread takes it uncontended on every call.
 */
#include "selene/store.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/store.h"
#include "record/dir.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

struct sel_store {
	pthread_mutex_t lock;
	struct rec_dir *dir;
	struct shard_device *device;
	struct shard_engine *engine;
	struct coord_store core; /* large: the index scratch and job table */
};

struct sel_history {
	struct rec_history history;
};

static int api_fail(int err, char *msg, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int api_fail(int err, char *msg, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (size) {
		va_start(ap, fmt);
		vsnprintf(msg, size, fmt, ap);
		va_end(ap);
	}
	return err;
}

static int jobs_store(void *ctx, uint64_t id, const struct shard_store_job *job)
{
	return shard_engine_store(ctx, id, job);
}

static int jobs_fetch(void *ctx, uint64_t id, const struct shard_fetch_job *job)
{
	return shard_engine_fetch(ctx, id, job);
}

static int jobs_truncate(void *ctx, uint64_t id, const struct rec_key *key)
{
	return shard_engine_truncate(ctx, id, key);
}

static int jobs_unlink(void *ctx, uint64_t id, const struct rec_key *key)
{
	return shard_engine_unlink(ctx, id, key);
}

static uint32_t jobs_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	return shard_engine_poll(ctx, out, max);
}

static int api_geometry(const struct sel_store_config *c, struct rec_geometry *g,
			char *err, size_t err_size)
{
	struct rec_plane *planes = calloc(c->page_plane_count ? c->page_plane_count : 1,
					  sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = c->page_tokens, .page_plane_count = c->page_plane_count,
		.page_planes = planes, .page_count = c->page_count, .row_count = c->row_count,
		.rank = 0, .world_size = 1,
	};
	int ret;

	if (!planes)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->page_plane_count; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "%s",
			 c->page_planes[i].name ? c->page_planes[i].name : "");
		planes[i].unit_bytes = c->page_planes[i].unit_bytes;
	}
	snprintf(spec.row_plane.name, sizeof(spec.row_plane.name), "%s",
		 c->row_plane.name ? c->row_plane.name : "");
	spec.row_plane.unit_bytes = c->row_plane.unit_bytes;
	ret = rec_geometry_init(g, &spec, err, err_size);
	free(planes);
	return ret;
}

/* Plane base addresses in the geometry's (name) order. */
static void api_planes(const struct sel_store_config *c, const struct rec_geometry *g,
		       struct shard_planes *planes)
{
	memset(planes, 0, sizeof(*planes));
	for (uint32_t p = 0; p < g->page_plane_count; p++)
		for (uint32_t i = 0; i < c->page_plane_count; i++)
			if (strcmp(g->page_planes[p].name, c->page_planes[i].name) == 0)
				planes->page_base[p] = c->page_planes[i].device_address;
	planes->row_base = c->row_plane.device_address;
}

/*
 * One tenth of the free space at startup, counting the store's own files as
 * free: otherwise every restart would shrink the budget by a tenth of what
 * the store already holds. 0 when the filesystem cannot say.
 */
static uint64_t auto_limit(const char *dir, uint64_t own_bytes)
{
	struct statvfs st;

	if (statvfs(dir, &st) != 0)
		return 0;
	return ((uint64_t)st.f_bavail * st.f_frsize + own_bytes) / 10;
}

static int api_open_disk(sel_store *s, const struct sel_store_config *c,
			 const struct rec_geometry *g, uint64_t *limit, char *err,
			 size_t err_size)
{
	struct rec_dir_options dir_options = { .base_path = c->dir,
					       .namespace_id = &s->core.namespace_id,
					       .geometry = g, .durable = c->durable };
	struct shard_engine_options engine_options = { .geometry = g, .register_pool = true };
	struct shard_planes planes;
	struct rec_scan scan;
	int ret;

	ret = rec_dir_open(&dir_options, &s->dir, err, err_size);
	if (ret)
		return ret;
	ret = rec_dir_scan(s->dir, &scan);
	if (ret)
		return api_fail(ret, err, err_size, "scanning %s: %s", rec_dir_path(s->dir),
				sel_strerror(ret));
	if (*limit == SEL_DISK_LIMIT_AUTO) {
		*limit = auto_limit(rec_dir_path(s->dir), scan.bytes);
		if (*limit == 0) {
			rec_scan_free(&scan);
			return api_fail(-EIO, err, err_size, "cannot tell the free space of %s "
					"for the default disk limit; configure one",
					rec_dir_path(s->dir));
		}
	}
	s->core.limit_bytes = *limit;
	s->core.stats.disk_limit_bytes = *limit;
	ret = coord_store_load(&s->core, scan.records, scan.record_count);
	rec_scan_free(&scan);
	if (ret)
		return api_fail(ret, err, err_size, "out of memory loading the index");
	ret = shard_device_open(c->device ? c->device : "auto", c->device_ordinal,
				&s->device, err, err_size);
	if (ret)
		return ret;
	api_planes(c, g, &planes);
	engine_options.dir = s->dir;
	engine_options.device = s->device;
	engine_options.planes = &planes;
	engine_options.jobs_max = COORD_JOBS_MAX;
	ret = shard_engine_open(&engine_options, &s->engine, err, err_size);
	if (ret)
		return ret;
	sel_info("store: %s, %s device, limit %" PRIu64 " bytes, %" PRIu64
		 " records scanned and kept", rec_dir_path(s->dir), s->device->ops->name,
		 *limit, s->core.stats.scanned_records);
	return 0;
}

int sel_store_open(const struct sel_store_config *c, sel_store **out, char *err,
		   size_t err_size)
{
	struct coord_jobs jobs = { .store = jobs_store, .fetch = jobs_fetch,
				   .truncate = jobs_truncate, .unlink = jobs_unlink,
				   .poll = jobs_poll };
	struct rec_identity model;
	struct rec_geometry *g = malloc(sizeof(*g));
	uint64_t limit = c->disk_limit_bytes;
	sel_store *s = calloc(1, sizeof(*s));
	int ret;

	*out = NULL;
	if (!s || !g) {
		free(g);
		free(s);
		return api_fail(-ENOMEM, err, err_size, "out of memory");
	}
	pthread_mutex_init(&s->lock, NULL);
	ret = api_geometry(c, g, err, err_size);
	if (ret)
		goto err_close;
	if (c->state_mode > REC_STATE_COPY_SPECULATION || !c->dir) {
		ret = api_fail(-EINVAL, err, err_size, "state mode %u or directory invalid",
			       c->state_mode);
		goto err_close;
	}
	memcpy(model.bytes, c->model_identity, sizeof(model.bytes));
	ret = coord_store_init(&s->core, g, &model, (enum rec_state_mode)c->state_mode,
			       limit == SEL_DISK_LIMIT_AUTO ? 0 : limit,
			       c->records_max ? c->records_max : 1u << 20, &jobs);
	if (ret) {
		api_fail(ret, err, err_size, "out of memory for the index");
		goto err_close;
	}
	if (limit != 0) {
		ret = api_open_disk(s, c, g, &limit, err, err_size);
		if (ret)
			goto err_close;
		s->core.jobs_ops.ctx = s->engine;
	}
	free(g);
	*out = s;
	return 0;
err_close:
	free(g);
	sel_store_close(s, 0);
	return ret;
}

int sel_store_close(sel_store *s, uint64_t drain_timeout_ms)
{
	uint64_t now = sel_monotonic_ns(), deadline;
	struct sel_event events[64];
	uint32_t in_flight = 0;

	if (!s)
		return 0;
	deadline = drain_timeout_ms > (UINT64_MAX - now) / 1000000ull ?
			   UINT64_MAX : now + drain_timeout_ms * 1000000ull;
	/* Drain: completions are applied so the index and files agree. */
	for (;;) {
		pthread_mutex_lock(&s->lock);
		if (s->engine) {
			coord_store_poll(&s->core, events, SEL_ARRAY_SIZE(events));
			in_flight = coord_store_jobs_in_flight(&s->core);
		}
		pthread_mutex_unlock(&s->lock);
		if (in_flight == 0 || sel_monotonic_ns() > deadline)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (in_flight > 0) {
		/*
		 * A copy may still be writing into device ids or staging: keep
		 * every buffer and thread rather than free them under it.
		 */
		sel_error("store: %u jobs still running at the close deadline; "
			  "leaving the store's buffers and threads in place", in_flight);
		return SEL_ESTOPPED;
	}
	shard_engine_close(s->engine);
	shard_device_close(s->device);
	rec_dir_close(s->dir);
	if (s->core.generation)
		coord_store_destroy(&s->core);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return 0;
}

int sel_history_create(sel_store *s, const uint32_t *tokens, uint64_t count,
		       sel_history **out)
{
	sel_history *h = malloc(sizeof(*h));
	int ret;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	ret = rec_history_init(&h->history, &s->core.model, tokens, count);
	if (ret) {
		free(h);
		return ret;
	}
	*out = h;
	return 0;
}

void sel_history_destroy(sel_history *h)
{
	if (!h)
		return;
	rec_history_free(&h->history);
	free(h);
}

bool sel_lookup(sel_store *s, const sel_history *h, uint64_t resident,
		struct sel_hit *hit)
{
	bool found;

	pthread_mutex_lock(&s->lock);
	found = coord_store_lookup(&s->core, &h->history, resident, hit);
	pthread_mutex_unlock(&s->lock);
	return found;
}

int sel_fetch(sel_store *s, const struct sel_hit *hit, const uint32_t *page_ids,
	      uint32_t state_slot, uint64_t waiter, bool *joined)
{
	int ret;

	*joined = false;
	if (!hit || !page_ids)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	ret = s->engine ? coord_store_fetch(&s->core, hit, page_ids, state_slot, waiter,
					    joined) :
			  SEL_ENOTFOUND;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_cancel(sel_store *s, uint64_t waiter)
{
	int ret;

	pthread_mutex_lock(&s->lock);
	ret = coord_store_cancel(&s->core, waiter);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_store_publish(sel_store *s, const struct sel_publication *pub,
		      enum sel_outcome *outcome)
{
	int ret;

	if (!pub || !pub->history || !outcome)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	ret = coord_store_publish(&s->core, &pub->history->history, pub, outcome);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

uint32_t sel_poll(sel_store *s, struct sel_event *events, uint32_t max)
{
	uint32_t n = 0;

	pthread_mutex_lock(&s->lock);
	if (s->engine)
		n = coord_store_poll(&s->core, events, max);
	pthread_mutex_unlock(&s->lock);
	return n;
}

void sel_store_stats(sel_store *s, struct sel_stats *out)
{
	pthread_mutex_lock(&s->lock);
	s->core.stats.disk_bytes = s->core.used_bytes;
	*out = s->core.stats;
	pthread_mutex_unlock(&s->lock);
}

/* Appends a Prometheus histogram at buf + used; the new length or -ENOSPC. */
static int metrics_histogram(char *buf, size_t size, size_t used, const char *kind,
			     const struct sel_latency_histogram *h)
{
	static const double bounds[SEL_LATENCY_BUCKETS] = SEL_LATENCY_BOUNDS;
	uint64_t cumulative = 0;
	int n;

	if (strcmp(kind, "store") == 0) {
		n = snprintf(buf + used, size - used,
			     "# TYPE selene_job_seconds histogram\n");
		if (n < 0 || (size_t)n >= size - used)
			return -ENOSPC;
		used += (size_t)n;
	}
	for (uint32_t b = 0; b <= SEL_LATENCY_BUCKETS; b++) {
		cumulative += h->counts[b];
		if (b < SEL_LATENCY_BUCKETS)
			n = snprintf(buf + used, size - used,
				     "selene_job_seconds_bucket{kind=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				     kind, bounds[b], cumulative);
		else
			n = snprintf(buf + used, size - used,
				     "selene_job_seconds_bucket{kind=\"%s\",le=\"+Inf\"} %" PRIu64 "\n"
				     "selene_job_seconds_sum{kind=\"%s\"} %.6f\n"
				     "selene_job_seconds_count{kind=\"%s\"} %" PRIu64 "\n",
				     kind, cumulative, kind, h->sum_seconds, kind, h->count);
		if (n < 0 || (size_t)n >= size - used)
			return -ENOSPC;
		used += (size_t)n;
	}
	return (int)used;
}

int sel_store_metrics(sel_store *s, char *buf, size_t size)
{
	struct sel_stats st;
	int n;

	sel_store_stats(s, &st);
	n = snprintf(buf, size,
		     "# TYPE selene_lookups_total counter\nselene_lookups_total %" PRIu64 "\n"
		     "# TYPE selene_hits_total counter\nselene_hits_total %" PRIu64 "\n"
		     "# TYPE selene_reused_tokens_total counter\nselene_reused_tokens_total %" PRIu64 "\n"
		     "# TYPE selene_publications_total counter\n"
		     "selene_publications_total{outcome=\"queued\"} %" PRIu64 "\n"
		     "selene_publications_total{outcome=\"present\"} %" PRIu64 "\n"
		     "selene_publications_total{outcome=\"retry\"} %" PRIu64 "\n"
		     "selene_publications_total{outcome=\"oversize\"} %" PRIu64 "\n"
		     "# TYPE selene_stores_total counter\n"
		     "selene_stores_total{result=\"ok\"} %" PRIu64 "\n"
		     "selene_stores_total{result=\"failed\"} %" PRIu64 "\n"
		     "# TYPE selene_fetches_total counter\n"
		     "selene_fetches_total %" PRIu64 "\n"
		     "# TYPE selene_fetch_failures_total counter\n"
		     "selene_fetch_failures_total %" PRIu64 "\n"
		     "# TYPE selene_bytes_total counter\n"
		     "selene_bytes_total{direction=\"out\"} %" PRIu64 "\n"
		     "selene_bytes_total{direction=\"in\"} %" PRIu64 "\n"
		     "# TYPE selene_evictions_total counter\nselene_evictions_total %" PRIu64 "\n"
		     "# TYPE selene_truncations_total counter\nselene_truncations_total %" PRIu64 "\n"
		     "# TYPE selene_unlinks_total counter\nselene_unlinks_total %" PRIu64 "\n"
		     "# TYPE selene_records gauge\nselene_records %" PRIu64 "\n"
		     "# TYPE selene_disk_bytes gauge\nselene_disk_bytes %" PRIu64 "\n"
		     "# TYPE selene_disk_limit_bytes gauge\nselene_disk_limit_bytes %" PRIu64 "\n"
		     "# TYPE selene_jobs_in_flight gauge\nselene_jobs_in_flight %" PRIu64 "\n",
		     st.lookups, st.hits, st.reused_tokens, st.published_queued,
		     st.published_present, st.published_retry, st.published_oversize,
		     st.stored, st.store_failures, st.fetches, st.fetch_failures,
		     st.bytes_stored, st.bytes_fetched, st.evictions, st.truncations,
		     st.unlinks, st.records, st.disk_bytes, st.disk_limit_bytes,
		     st.jobs_in_flight);
	if (n < 0 || (size_t)n >= size)
		return -ENOSPC;
	n = metrics_histogram(buf, size, (size_t)n, "store", &st.store_latency);
	if (n >= 0)
		n = metrics_histogram(buf, size, (size_t)n, "fetch", &st.fetch_latency);
	return n;
}
