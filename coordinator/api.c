/*
 * The public store API (include/selene/store.h) for a world of one rank:
 * opens the record directory, the device and the shard engine, rebuilds
 * the index from the startup scan, and hands every call to the policy in
 * store.c. A mutex makes stats and metrics safe from other threads; the
 * worker thread takes it uncontended on every call.
 */
#include "selene/store.h"

#include "cluster/join.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "coordinator/agreement.h"
#include "coordinator/store.h"
#include "record/dir.h"
#include "record/file.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/warm.h"
#include "shard/config.h"
#include "coordinator/cluster.h"
#include "coordinator/fanout.h"
#include "coordinator/metrics.h"
#include "coordinator/bench.h"
#include "coordinator/pool.h"
#include "coordinator/pool_session.h"
#include "shard/pool_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/statvfs.h>

/* Rank zero's pool connection, seen from the model thread's polls. */
enum api_pool_state {
	API_POOL_ATTACHED,   /* attached, or never (pool_link NULL) */
	API_POOL_WAIT,       /* lost: waiting for the backoff and no put or claim in flight */
	API_POOL_CONNECTING, /* a thread opens rank zero's new connection */
	API_POOL_RANKS,      /* every peer reattaches (the fan-out's reserved job) */
};

struct sel_store {
	pthread_mutex_t lock;
	struct rec_dir *dir;
	struct shard_device *device;
	struct shard_engine *engine;
	struct sel_cluster cluster;    /* world_size 1 without one */
	uint64_t warm_bytes;           /* the warm tier every rank must have */
	uint8_t warm_policy;           /* and its write policy */
	struct coord_peer *peers;      /* world_size - 1, until the fan-out takes them */
	bool form_attempted;           /* the formation told the peers of any failure */
	bool opened;                   /* sel_store_open succeeded: close says BYE */
	struct coord_fanout *fanout;
	/* the pool (docs/DESIGN.md section 13): all NULL while not attached */
	struct shard_pool_link *pool_link;   /* rank zero's connection */
	char pool_address[CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX + 1]; /* for its warnings */
	struct coord_pool_client_session pool_session;
	struct coord_pool *pool_driver;
	/* reconnect after a lost session (docs/DESIGN.md section 13) */
	struct shard_pool_plan *pool_plan;   /* kept for the reconnects */
	uint8_t pool_instance_id[POOL_INSTANCE_ID_BYTES];
	enum api_pool_state pool_state;
	uint64_t pool_retry_ns;              /* next try, while API_POOL_WAIT */
	uint32_t pool_backoff_ms;
	uint32_t pool_attach_job;            /* the ranks' reattach, while API_POOL_RANKS */
	pthread_t pool_thread;               /* the connect, while API_POOL_CONNECTING */
	_Atomic bool pool_thread_done;
	struct shard_pool_link *pool_new_link; /* the thread's */
	int pool_new_result;
	char pool_new_why[256];
	struct sel_bench_startup startup; /* where sel_store_open spent its time */
	struct coord_store core; /* large: the index scratch and job table */
	sel_store *next_open;    /* open_stores' list */
	uint32_t monitors;       /* stats and metrics calls running on it */
	uint32_t fork_generation; /* sel_fork_generation at open (api_forked) */
};

/*
 * Whether the caller is not the process that opened s: a child of fork()
 * has a copy of the store but none of its threads, so every call there is
 * refused with -ECHILD before it touches a lock, a queue or a thread.
 */
static bool api_forked(const sel_store *s)
{
	return s->fork_generation != sel_fork_generation();
}

/*
 * The way into an entry point that works under the store's lock: -EINVAL
 * for a NULL s, -ECHILD in a forked child (api_forked), else 0 with
 * s->lock held, which the caller unlocks.
 */
static int api_lock(sel_store *s)
{
	if (!s)
		return -EINVAL;
	if (api_forked(s))
		return -ECHILD;
	pthread_mutex_lock(&s->lock);
	return 0;
}

/*
 * The open stores. sel_store_stats and sel_store_metrics may come from any
 * thread, also while (or after) the worker thread closes the store: each
 * finds its handle here and counts itself in under open_stores_lock, and
 * close takes the handle out and waits for those calls to leave before it
 * frees anything. A handle not found (closing, closed) answers -ESHUTDOWN
 * without being read.
 */
static pthread_mutex_t open_stores_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t open_stores_idle = PTHREAD_COND_INITIALIZER;
static sel_store *open_stores;
static pthread_once_t open_stores_fork_once = PTHREAD_ONCE_INIT;

/*
 * A fork() while another thread holds open_stores_lock would leave it held
 * for good in the child, whose stats or metrics call (answered -ECHILD for
 * the parent's stores) would then hang: the lock is taken across fork and
 * released on both sides; the child's condition variable starts afresh, as
 * the parent's waiters do not exist there.
 */
static void open_stores_fork_prepare(void)
{
	pthread_mutex_lock(&open_stores_lock);
}

static void open_stores_fork_parent(void)
{
	pthread_mutex_unlock(&open_stores_lock);
}

static void open_stores_fork_child(void)
{
	pthread_cond_init(&open_stores_idle, NULL);
	pthread_mutex_unlock(&open_stores_lock);
}

static void open_stores_watch_forks(void)
{
	pthread_atfork(open_stores_fork_prepare, open_stores_fork_parent,
		       open_stores_fork_child);
}

static void open_stores_add(sel_store *s)
{
	pthread_once(&open_stores_fork_once, open_stores_watch_forks);
	pthread_mutex_lock(&open_stores_lock);
	s->next_open = open_stores;
	open_stores = s;
	pthread_mutex_unlock(&open_stores_lock);
}

/* Takes s out of the list (if there) and waits out its monitor calls. */
static void open_stores_remove(sel_store *s)
{
	pthread_mutex_lock(&open_stores_lock);
	for (sel_store **p = &open_stores; *p; p = &(*p)->next_open) {
		if (*p == s) {
			*p = s->next_open;
			break;
		}
	}
	while (s->monitors > 0)
		pthread_cond_wait(&open_stores_idle, &open_stores_lock);
	pthread_mutex_unlock(&open_stores_lock);
}

/*
 * 0 when s is open in this process: it then stays allocated until
 * monitor_leave. -ESHUTDOWN when it is not open (never read), -ECHILD when
 * it was opened by the process this one was forked from.
 */
static int monitor_enter(const sel_store *s)
{
	int ret = -ESHUTDOWN;

	pthread_mutex_lock(&open_stores_lock);
	for (sel_store *p = open_stores; p && ret == -ESHUTDOWN; p = p->next_open) {
		if (p != s)
			continue;
		ret = api_forked(p) ? -ECHILD : 0;
		if (ret == 0)
			p->monitors++;
	}
	pthread_mutex_unlock(&open_stores_lock);
	return ret;
}

static void monitor_leave(sel_store *s)
{
	pthread_mutex_lock(&open_stores_lock);
	if (--s->monitors == 0)
		pthread_cond_broadcast(&open_stores_idle);
	pthread_mutex_unlock(&open_stores_lock);
}

struct sel_history {
	struct rec_history history;
	struct coord_pool_ticket ticket; /* its pool lookup (zero: none asked) */
};

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

static int jobs_warm_drop(void *ctx, uint64_t id, const struct rec_key *key)
{
	return shard_engine_warm_drop(ctx, id, key);
}

static int jobs_noop(void *ctx, uint64_t id)
{
	return shard_engine_noop(ctx, id);
}

static uint32_t jobs_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	return shard_engine_poll(ctx, out, max);
}

/* Whether a peer connected from the address its rank announced. */
static bool address_allowed(void *ctx, uint32_t rank, const struct sockaddr *addr,
			    socklen_t len)
{
	const struct sel_cluster *c = ctx;
	struct in_addr v4, announced4;
	struct in6_addr announced6;
	const struct in6_addr *v6 = NULL;

	(void)len;
	if (!c->rank_addresses || !c->rank_addresses[rank])
		return true;
	/*
	 * Compared as addresses, not text: rank zero's own listener is dual
	 * stack, so an IPv4 peer arrives as ::ffff:a.b.c.d.
	 */
	if (addr->sa_family == AF_INET) {
		v4 = ((const struct sockaddr_in *)addr)->sin_addr;
	} else if (addr->sa_family == AF_INET6) {
		v6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(v6)) {
			memcpy(&v4.s_addr, &v6->s6_addr[12], sizeof(v4.s_addr));
			v6 = NULL;
		}
	} else {
		return false;
	}
	if (v6)
		return inet_pton(AF_INET6, c->rank_addresses[rank], &announced6) == 1 &&
		       memcmp(&announced6, v6, sizeof(announced6)) == 0;
	return inet_pton(AF_INET, c->rank_addresses[rank], &announced4) == 1 &&
	       announced4.s_addr == v4.s_addr;
}

/* Rank zero listens on every address of the coordinator port. */
static int api_listen(const struct sel_cluster *c, char *err, size_t err_size)
{
	struct sockaddr_in6 addr = { .sin6_family = AF_INET6, .sin6_addr = in6addr_any,
				     .sin6_port = htons(c->coordinator_port) };
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;

	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	}
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(fd, SOMAXCONN) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return sel_fail(-e, err, err_size, "cannot listen on port %u: %s",
				c->coordinator_port, strerror(e));
	}
	return fd;
}

/* "3 ranks on port 5000: rank 1 10.0.0.2, rank 2 10.0.0.3" (8 named at most). */
static void describe_transport(const sel_store *s, char *out, size_t size)
{
	const struct sel_cluster *c = &s->cluster;
	size_t n;

	if (c->world_size == 1) {
		snprintf(out, size, "one rank");
		return;
	}
	n = (size_t)snprintf(out, size, "%u ranks on port %u:", c->world_size,
			     c->coordinator_port);
	for (uint32_t i = 0; i + 1 < c->world_size && n < size; i++) {
		struct sockaddr_storage addr;
		socklen_t len = sizeof(addr);
		char text[INET6_ADDRSTRLEN] = "?";

		if (i == 8) {
			snprintf(out + n, size - n, " ...");
			return;
		}
		if (getpeername(s->peers[i].fd, (struct sockaddr *)&addr, &len) == 0)
			sel_address_text(&addr, text, sizeof(text));
		n += (size_t)snprintf(out + n, size - n, "%s rank %u %s", i ? "," : "",
				      s->peers[i].rank, text);
	}
}

/*
 * Forms the cluster on the scanned directory (every rank agrees), and
 * replaces the scan with the agreed records: the agreement may have
 * deleted or truncated files, and rank zero's directory now holds exactly
 * those (no second scan). Without a
 * disk store (limit 0, no directory) rank zero still forms, so that a rank
 * with a disk store is refused with the reason on both sides. The join port
 * closes once the cluster formed (a listener of the caller's is shut down;
 * the caller still closes it).
 */
static int api_form(sel_store *s, const struct rec_geometry *g, struct rec_scan *scan,
		    uint64_t *limit, char *err, size_t err_size)
{
	const struct sel_cluster *c = &s->cluster;
	int listen_fd = c->listen_fd >= 0 ? c->listen_fd : api_listen(c, err, err_size);
	struct coord_form_times times = { 0 };
	struct rec_scan agreed = { 0 };
	struct coord_form_options o = {
		.listen_fd = listen_fd, .secret = c->secret,
		.policy = { .world_size = c->world_size, .layout_digest = g->layout_digest,
			    .has_disk_store = *limit != 0, .warm_bytes = s->warm_bytes,
			    .warm_policy = s->warm_bytes ? s->warm_policy : 0,
			    .address_allowed = address_allowed,
			    .ctx = &s->cluster },
		.disk_limit_bytes = *limit, .dir = s->dir,
		.records = scan ? scan->records : NULL,
		.record_count = scan ? scan->record_count : 0,
		.held = scan ? scan->held : NULL, .held_count = scan ? scan->held_count : 0,
		.records_max = s->core.index.nodes_max,
		.timeout_ms = c->join_timeout_ms ? c->join_timeout_ms : 60000,
		.marked = s->dir && (scan ? rec_dir_scan_marked(s->dir, scan) :
					    rec_dir_marked(s->dir)),
		.accept_empty_ranks = c->accept_empty_ranks,
		.times = &times, .agreed = scan ? &agreed : NULL,
	};
	int ret;

	if (listen_fd < 0)
		return listen_fd;
	s->form_attempted = true;
	s->peers = calloc(c->world_size, sizeof(*s->peers));
	ret = s->peers ? coord_cluster_form(&o, s->peers, limit, err, err_size) : -ENOMEM;
	if (c->listen_fd < 0)
		close(listen_fd);
	else
		shutdown(listen_fd, SHUT_RDWR);
	s->startup.join_ns = times.join_ns;
	s->startup.summary_ns = times.summary_ns;
	s->startup.agreement_ns = times.agreement_ns;
	s->startup.apply_ns = times.apply_ns;
	if (ret || !scan)
		return ret;
	rec_scan_free(scan);
	*scan = agreed;
	return 0;
}

/*
 * A store of one rank whose directory holds more records than its index
 * can: the agreement's rule 6 over its own scan (coordinator/agreement.h)
 * picks the least recently used leaves, whose files are deleted, so every
 * file kept is in the index and under the disk limit. A world of several
 * ranks does this in its agreement.
 */
static int api_fit_scan(sel_store *s, struct rec_scan *scan, char *err, size_t err_size)
{
	/*
	 * Held files (R-DIR-7) stay out: the scan left them and what depends
	 * on them in place, and every record listed here is the index's.
	 */
	struct coord_rank_records mine = { scan->records, scan->record_count, NULL, 0 };
	struct coord_agreement a;
	const enum coord_action *actions;
	size_t kept = 0;
	int ret;

	if (scan->record_count <= s->core.index.nodes_max)
		return 0;
	ret = coord_agreement_decide(&a, &mine, 1, s->core.index.nodes_max);
	if (ret)
		return sel_fail(ret, err, err_size, "fitting %zu records into records_max %u: %s",
				scan->record_count, s->core.index.nodes_max, sel_strerror(ret));
	actions = coord_agreement_actions(&a, 0);
	for (size_t i = 0; !ret && i < scan->record_count; i++) {
		if (actions[i] == COORD_ACTION_KEEP) {
			scan->records[kept++] = scan->records[i];
			continue;
		}
		ret = rec_unlink(s->dir, &scan->records[i].key);
		ret = ret == -ENOENT ? 0 : ret;
		if (ret) {
			sel_fail(ret, err, err_size, "deleting a record past records_max: %s",
				 sel_strerror(ret));
			break;
		}
		scan->bytes -= scan->records[i].file_bytes;
	}
	if (!ret)
		sel_warn("%s: %zu records past records_max (%u) deleted, the least recently "
			 "used first", rec_dir_path(s->dir), scan->record_count - kept,
			 s->core.index.nodes_max);
	/* the scan's order, oldest first, is kept */
	if (!ret)
		scan->record_count = kept;
	coord_agreement_destroy(&a);
	return ret;
}

/*
 * Rank zero failed at startup before it could form: tells the peers that
 * connect meanwhile (coord_cluster_notify_failure), so they stop now.
 */
static void api_notify_failure(sel_store *s, const char *why)
{
	const struct sel_cluster *c = &s->cluster;
	char ignored[256];
	int listen_fd;

	if (c->world_size < 2 || c->rank != 0 || s->form_attempted)
		return;
	listen_fd = c->listen_fd >= 0 ? c->listen_fd : api_listen(c, ignored, sizeof(ignored));
	coord_cluster_notify_failure(listen_fd, c->world_size, NULL, why);
	if (c->listen_fd < 0 && listen_fd >= 0)
		close(listen_fd);
}

/* This rank's directory (locked, scanned), the disk limit, device and engine. */
static int api_open_local(sel_store *s, const struct sel_store_config *c,
			  const struct rec_geometry *g, struct rec_scan *scan, uint64_t *limit,
			  char *err, size_t err_size)
{
	struct rec_dir_options dir_options = { .base_path = c->dir,
					       .namespace_id = &s->core.namespace_id,
					       .geometry = g, .durable = c->durable };
	struct shard_engine_options engine_options = { .geometry = g, .register_pool = true };
	struct shard_planes planes;
	uint64_t step;
	int ret;

	ret = rec_dir_open(&dir_options, &s->dir, err, err_size);
	if (ret)
		return ret;
	step = sel_monotonic_ns();
	ret = rec_dir_scan(s->dir, scan);
	s->startup.scan_ns = sel_monotonic_ns() - step;
	s->startup.scan_headers_read = ret ? 0 : scan->headers_read;
	s->startup.scan_cache_hits = ret ? 0 : scan->cache_hits;
	if (ret)
		return rec_dir_scan_failed(s->dir, scan, ret, err, err_size);
	if (*limit == SEL_DISK_LIMIT_AUTO) {
		ret = shard_config_auto_limit(rec_dir_path(s->dir), scan->bytes,
					      rec_geometry_file_bytes(g, 1, true), limit, err,
					      err_size);
		if (ret)
			return ret;
	}
	ret = shard_device_open(c->device ? c->device : "auto", c->device_ordinal,
				&s->device, err, err_size);
	if (ret)
		return ret;
	shard_config_planes(c, g, &planes);
	engine_options.dir = s->dir;
	engine_options.device = s->device;
	engine_options.planes = &planes;
	engine_options.jobs_max = COORD_JOBS_MAX;
	engine_options.warm_bytes = c->warm_bytes;
	ret = shard_engine_open(&engine_options, &s->engine, err, err_size);
	if (!ret && c->warm_bytes) {
		struct shard_warm_stats ws;

		/* Rank zero's count stands for every rank's (the join agrees on it). */
		shard_engine_warm_stats(s->engine, &ws);
		if (coord_store_set_warm(&s->core, ws.slots_total, ws.row_slots,
					 g->page_record_bytes, c->warm_policy) != 0)
			ret = sel_fail(-ENOMEM, err, err_size, "out of memory for the warm index");
	}
	/* the local engine's until a fan-out takes the jobs (close polls it) */
	s->core.jobs_ops.ctx = s->engine;
	return ret;
}

/*
 * Opens this rank's storage, and only then forms the cluster: a local
 * failure is told to the peers instead of leaving them at the join.
 */
static int api_open_disk(sel_store *s, const struct sel_store_config *c,
			 const struct rec_geometry *g, uint64_t *limit, char *err,
			 size_t err_size)
{
	struct rec_scan scan = { 0 };
	struct shard_engine_stats engine_stats;
	uint64_t scanned, kept, step;
	char transport[512], warm[128], staging[96];
	int ret;

	s->warm_bytes = c->warm_bytes;
	s->warm_policy = c->warm_policy;
	s->core.max_age_ns = c->max_age_ms * 1000000ull;
	ret = api_open_local(s, c, g, &scan, limit, err, err_size);
	kept = scan.record_count;
	scanned = kept + scan.invalid_dropped + scan.orphans_dropped + scan.page_only_dropped;
	if (!ret && s->cluster.world_size > 1)
		ret = api_form(s, g, &scan, limit, err, err_size);
	else if (!ret)
		ret = api_fit_scan(s, &scan, err, err_size);
	if (ret) {
		rec_scan_free(&scan);
		return ret;
	}
	describe_transport(s, transport, sizeof(transport)); /* before the fan-out takes them */
	s->core.limit_bytes = *limit;
	s->core.stats.disk_limit_bytes = *limit;
	step = sel_monotonic_ns();
	ret = coord_store_load(&s->core, scan.records, scan.record_count);
	if (!ret)
		ret = coord_store_hold(&s->core, scan.held, scan.held_count);
	s->startup.index_ns = sel_monotonic_ns() - step;
	rec_scan_free(&scan);
	if (ret)
		return sel_fail(ret, err, err_size, "out of memory loading the index");
	if (s->cluster.world_size > 1) {
		const struct sel_cluster *cl = &s->cluster;

		ret = coord_fanout_open(&(struct coord_fanout_options){
			.local = s->engine, .peers = s->peers, .peer_count = cl->world_size - 1,
			.heartbeat_ms = (cl->silence_timeout_ms ? cl->silence_timeout_ms : 10000) / 4,
			.silence_timeout_ms = cl->silence_timeout_ms ? cl->silence_timeout_ms : 10000,
			.job_timeout_ms = cl->job_timeout_ms ? cl->job_timeout_ms : 60000,
			.queue_bytes_max = 64u << 20 }, &s->fanout);
		if (ret)
			return sel_fail(ret, err, err_size, "starting the links: %s",
					sel_strerror(ret));
		coord_fanout_jobs(s->fanout, &s->core.jobs_ops);
	}
	shard_engine_stats(s->engine, &engine_stats);
	shard_engine_describe_warm(s->engine, warm, sizeof(warm));
	shard_engine_describe_staging(s->engine, staging, sizeof(staging));
	/* One line that says how this store runs (docs/DESIGN.md section 9). */
	sel_info("store: %s; device %s; I/O %s, %u kernel workers, %u checksum threads "
		 "(%u verifying), "
		 "%u stores at once; transport %s; %s; %s; records %" PRIu64 " scanned, %"
		 PRIu64 " kept, %" PRIu64 " agreed; disk limit %" PRIu64 " bytes",
		 rec_dir_path(s->dir),
		 s->device->ops->name, engine_stats.disk_engine, engine_stats.io_workers,
		 engine_stats.checksum_threads, engine_stats.verify_threads,
		 engine_stats.stores_max, transport, staging, warm, scanned, kept,
		 s->core.stats.scanned_records, *limit);
	return 0;
}

/*
 * The pool secret file is the caller's configuration, read before anything
 * else opens: missing, too open or not 32 bytes fails the open, naming it
 * (a manager that refuses the secret only disables the pool).
 */
static int api_pool_secret(const struct sel_store_config *c, char *err, size_t err_size)
{
	uint8_t secret[CLUSTER_SECRET_BYTES];
	int ret;

	if (!c->pool)
		return 0;
	ret = cluster_secret_load(c->pool_secret_file, "pool_secret_file", secret, err,
				  err_size);
	explicit_bzero(secret, sizeof(secret)); /* only checked here */
	return ret;
}

/* How long rank zero waits for the manager at open (the pool's fixed decision 7). */
#define API_POOL_WAIT_MS 10000u

/* Every rank's share of a pool put or claim: the fan-out's, or rank zero's engine alone. */
static int pool_ranks_fan_put(void *ctx, uint64_t job_id, const struct rec_key *key,
			      uint64_t put_id, uint64_t share_bytes)
{
	return coord_fanout_pool_put(ctx, job_id, key, put_id, share_bytes);
}

static int pool_ranks_fan_claim(void *ctx, uint64_t job_id,
				const struct shard_pool_claim_job *claim, uint32_t page_id_count)
{
	return coord_fanout_pool_claim(ctx, job_id, claim, page_id_count);
}

static int pool_ranks_fan_claim_early(void *ctx, uint64_t job_id,
				      const struct shard_pool_claim_job *claim)
{
	return coord_fanout_pool_claim_early(ctx, job_id, claim);
}

static void pool_ranks_fan_claim_cancel(void *ctx, uint64_t job_id, int result, const char *why)
{
	coord_fanout_pool_claim_cancel(ctx, job_id, result, why);
}

static int pool_ranks_engine_claim_early(void *ctx, uint64_t job_id,
					 const struct shard_pool_claim_job *claim)
{
	return shard_engine_pool_claim(ctx, job_id, claim);
}

static int pool_ranks_engine_put(void *ctx, uint64_t job_id, const struct rec_key *key,
				 uint64_t put_id, uint64_t share_bytes)
{
	return shard_engine_pool_put(ctx, job_id, key, put_id, share_bytes);
}

static int pool_ranks_fan_export(void *ctx, uint64_t job_id,
				 const struct shard_pool_export_job *export)
{
	return coord_fanout_pool_export(ctx, job_id, export);
}

static int pool_ranks_engine_export(void *ctx, uint64_t job_id,
				    const struct shard_pool_export_job *export)
{
	return shard_engine_pool_export(ctx, job_id, export);
}

static int pool_ranks_engine_claim(void *ctx, uint64_t job_id,
				   const struct shard_pool_claim_job *claim, uint32_t page_id_count)
{
	(void)page_id_count;
	return shard_engine_pool_claim(ctx, job_id, claim);
}

/*
 * Every peer opens its own connection (R-WIRE-21's pool attach); waits for
 * their answers, each bounded by its own connect deadline, or for the
 * fan-out to stop (a peer that never answers outlives the job timeout).
 * The fan-out has no other job in flight yet: job id 0 is free.
 */
static int api_pool_attach_peers(sel_store *s, const uint8_t *instance_id, const char *address,
				 char *why, size_t why_size)
{
	struct shard_completion done;
	int ret;

	ret = coord_fanout_pool_attach(s->fanout, 0, instance_id, address);
	if (ret)
		return sel_fail(ret, why, why_size, "the peers could not be asked to attach: %s",
				sel_strerror(ret));
	while (s->core.jobs_ops.poll(s->core.jobs_ops.ctx, &done, 1) == 0) {
		if (s->core.jobs_ops.stopped(s->core.jobs_ops.ctx, why, why_size))
			return SEL_ESTOPPED;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (done.result)
		return sel_fail(done.result, why, why_size, "%s", done.why);
	return 0;
}

/* The driver between the policy and its jobs, and the store's lookups, over the session. */
static int api_pool_drive(sel_store *s, const struct rec_geometry *g)
{
	struct coord_pool_ranks ranks = s->fanout ?
		(struct coord_pool_ranks){ .ctx = s->fanout, .put = pool_ranks_fan_put,
					   .claim = pool_ranks_fan_claim,
					   .claim_early = pool_ranks_fan_claim_early,
					   .claim_cancel = pool_ranks_fan_claim_cancel,
					   .export = pool_ranks_fan_export } :
		(struct coord_pool_ranks){ .ctx = s->engine, .put = pool_ranks_engine_put,
					   .claim = pool_ranks_engine_claim,
					   .claim_early = pool_ranks_engine_claim_early,
					   .export = pool_ranks_engine_export };
	struct pool_client *client = shard_pool_link_client(s->pool_link);
	struct coord_pool_session session;
	struct coord_pool_ops ops;
	const uint8_t *arena;
	uint64_t arena_bytes;
	char ignored[200];
	int ret;

	ret = coord_pool_client_session_init(&s->pool_session, client, s->cluster.world_size);
	if (ret)
		return ret;
	coord_pool_client_session_fill(&s->pool_session, &session, &ops);
	ret = coord_pool_open(&s->core.jobs_ops, &session, &ranks, s->cluster.world_size,
			      g->page_count, &s->core.stats.pool_refusals, &s->pool_driver);
	if (ret)
		return ret;
	coord_pool_jobs(s->pool_driver, &s->core.jobs_ops);
	ret = coord_store_set_pool(&s->core, true);
	if (!ret) {
		/* the manager's host maps its arena: the grace period is local */
		bool same_host = pool_arena_map(client, &arena, &arena_bytes, ignored,
						sizeof(ignored)) == 0;

		ret = coord_store_set_pool_lookups(&s->core, &ops,
						   coord_pool_grace_ns(same_host,
								       pool_client_rtt_us(client)));
	}
	/* GPU checkpoint exports: every rank's engine builds its own share */
	if (coord_store_gpu_exports(&s->core, !ret && s->core.jobs_ops.pool_export != NULL))
		sel_warn("pool: no memory for the GPU checkpoints' offers: none is exported");
	return ret;
}

/*
 * Undoes api_pool_attach once no job runs (engine_open: the engine still
 * holds the connection): the links before the session.
 */
static void api_pool_detach(sel_store *s, bool engine_open)
{
	if (s->pool_state == API_POOL_CONNECTING) {
		pthread_join(s->pool_thread, NULL); /* bounded by its connect deadline */
		shard_pool_link_close(s->pool_new_link);
		s->pool_new_link = NULL;
	}
	if (s->pool_state == API_POOL_RANKS && s->core.generation)
		coord_store_job_unreserve(&s->core, s->pool_attach_job);
	s->pool_state = API_POOL_ATTACHED;
	if (s->pool_plan) {
		shard_pool_plan_destroy(s->pool_plan);
		free(s->pool_plan);
		s->pool_plan = NULL;
	}
	if (s->pool_link && engine_open)
		shard_engine_set_pool(s->engine, NULL, NULL);
	shard_pool_link_close(s->pool_link);
	s->pool_link = NULL;
	coord_pool_close(s->pool_driver);
	s->pool_driver = NULL;
	coord_pool_client_session_destroy(&s->pool_session);
}

/*
 * Attaches the store to the pool manager at c->pool (the pool's fixed
 * decision 7): rank zero waits up to API_POOL_WAIT_MS for the manager,
 * then every peer attaches. A manager that does not answer or refuses a
 * rank leaves the store on its local tiers with one warning saying why;
 * it never fails the open.
 */
static int api_pool_attach(sel_store *s, const struct sel_store_config *c,
			   const struct rec_geometry *g, char *err, size_t err_size)
{
	struct coord_jobs inner = s->core.jobs_ops;
	struct shard_pool_plan *plan;
	struct shard_pool_conn conn;
	uint8_t instance_id[POOL_INSTANCE_ID_BYTES] = { 0 };
	char why[256] = "";
	int ret;

	if (!s->engine) {
		sel_warn("pool %s: not attached: the store has no disk tier (disk_limit_bytes "
			 "0), so nothing cascades; it runs on its local tiers", c->pool);
		return 0;
	}
	plan = malloc(sizeof(*plan));
	if (!plan)
		return sel_fail(-ENOMEM, err, err_size, "out of memory");
	ret = shard_pool_plan_init(plan, c, 0, s->cluster.world_size, &s->core.namespace_id);
	if (ret) {
		/* api_pool_secret checked the file: only a geometry or memory is left */
		ret = sel_fail(ret, err, err_size, "pool: %s", plan->why);
		goto out_free_plan;
	}
	while (getrandom(instance_id, sizeof(instance_id), 0) != sizeof(instance_id) ||
	       !instance_id[0])
		;
	ret = shard_pool_link_open(plan, c->pool, instance_id, API_POOL_WAIT_MS, &s->pool_link,
				   why, sizeof(why));
	if (!ret && s->fanout)
		ret = api_pool_attach_peers(s, instance_id, c->pool, why, sizeof(why));
	if (!ret) {
		shard_pool_link_conn(s->pool_link, &conn);
		ret = shard_engine_set_pool(s->engine, &conn, &s->core.namespace_id);
	}
	if (!ret)
		ret = api_pool_drive(s, g);
	if (ret) {
		if (!why[0])
			snprintf(why, sizeof(why), "%s", sel_strerror(ret));
		sel_warn("pool %s: not attached: %s; the store runs on its local tiers",
			 c->pool, why);
		if (s->core.pool_on)
			coord_store_set_pool(&s->core, false);
		s->core.jobs_ops = inner;
		api_pool_detach(s, true);
		ret = 0;
	} else {
		snprintf(s->pool_address, sizeof(s->pool_address), "%s", c->pool);
		sel_info("pool %s: attached as \"%s\" (%u ranks)", c->pool,
			 pool_client_facts(shard_pool_link_client(s->pool_link))->name,
			 s->cluster.world_size);
		memcpy(s->pool_instance_id, instance_id, sizeof(instance_id));
		s->pool_plan = plan; /* the reconnects open with it */
		return 0;
	}
out_free_plan:
	shard_pool_plan_destroy(plan);
	free(plan);
	return ret;
}

/* sel_store_open's work, with a reason buffer of at least 256 bytes. */
static int store_open(const struct sel_store_config *c, sel_store **out, bool no_err_buffer,
		      char *err, size_t err_size)
{
	struct coord_jobs jobs = { .store = jobs_store, .fetch = jobs_fetch,
				   .truncate = jobs_truncate, .unlink = jobs_unlink,
				   .noop = jobs_noop, .warm_drop = jobs_warm_drop,
				   .poll = jobs_poll };
	struct rec_identity model;
	struct rec_geometry *g;
	uint64_t limit = c ? c->disk_limit_bytes : 0;
	sel_store *s;
	int ret = 0;

	if (no_err_buffer)
		ret = sel_fail(-EINVAL, err, err_size, "sel_store_open was given an error "
			       "buffer size but no buffer (err is NULL)");
	else if (!out)
		ret = sel_fail(-EINVAL, err, err_size, "no place for the store (out is NULL)");
	else
		*out = NULL;
	g = malloc(sizeof(*g));
	s = calloc(1, sizeof(*s));
	if (s) {
		s->startup.open_ns = sel_monotonic_ns();
		s->fork_generation = sel_fork_generation();
	}
	if (!ret)
		ret = sel_failpoints_from_env(err, err_size);
	if (!ret)
		ret = shard_config_validate(c, err, err_size);
	if (ret || !s || !g) {
		/*
		 * The peers learn it, not at their timeout; only through a
		 * cluster description that is itself valid: a refused one is
		 * never bound, polled or sized from.
		 */
		if (ret && s && c && c->cluster &&
		    shard_config_check_cluster(c->cluster, NULL, 0) == 0) {
			s->cluster = *c->cluster;
			api_notify_failure(s, err);
		}
		free(g);
		free(s);
		return ret ? ret : sel_fail(-ENOMEM, err, err_size, "out of memory");
	}
	pthread_mutex_init(&s->lock, NULL);
	sel_log_set_rank(c->cluster ? c->cluster->rank : 0);
	s->cluster = c->cluster ? *c->cluster : (struct sel_cluster){ .world_size = 1,
								      .listen_fd = -1 };
	if (s->cluster.rank != 0 || s->cluster.world_size == 0) {
		ret = sel_fail(-EINVAL, err, err_size, s->cluster.rank ?
			       "rank %u runs a peer (sel_peer_start), not the store" :
			       "a world of 0 ranks", s->cluster.rank);
		goto err_close;
	}
	ret = shard_config_geometry(c, 0, s->cluster.world_size, g, err, err_size);
	if (ret)
		goto err_close;
	ret = api_pool_secret(c, err, err_size);
	if (ret)
		goto err_close;
	memcpy(model.bytes, c->model_identity, sizeof(model.bytes));
	ret = coord_store_init(&s->core, g, &model, (enum rec_state_mode)c->state_mode,
			       limit == SEL_DISK_LIMIT_AUTO ? 0 : limit,
			       c->records_max ? c->records_max : 1u << 20, &jobs);
	if (ret) {
		sel_fail(ret, err, err_size, "out of memory for the index");
		goto err_close;
	}
	if (limit != 0) {
		ret = api_open_disk(s, c, g, &limit, err, err_size);
		if (ret)
			goto err_close;
		if (!s->fanout)
			s->core.jobs_ops.ctx = s->engine;
	} else if (s->cluster.world_size > 1) {
		/* no disk store here: the join checks that no rank has one */
		ret = api_form(s, g, NULL, &limit, err, err_size);
		if (ret)
			goto err_close;
	}
	if (c->pool) {
		ret = api_pool_attach(s, c, g, err, err_size);
		if (ret)
			goto err_close;
	}
	free(g);
	s->startup.open_ns = sel_monotonic_ns() - s->startup.open_ns;
	s->opened = true;
	open_stores_add(s);
	*out = s;
	return 0;
err_close:
	api_notify_failure(s, err);
	free(g);
	sel_store_close(s, 0);
	return ret;
}

int sel_store_open(const struct sel_store_config *c, sel_store **out, char *err,
		   size_t err_size)
{
	struct sel_reason reason;
	/* no buffer, or a small one: the peers are still told all of the reason */
	bool no_err_buffer = sel_reason_begin(&reason, &err, &err_size);

	return sel_reason_end(&reason, store_open(c, out, no_err_buffer, err, err_size));
}

int sel_store_close(sel_store *s, uint64_t drain_timeout_ms)
{
	uint64_t now = sel_monotonic_ns(), deadline;
	struct sel_event events[64];
	uint32_t in_flight = 0, retries = 0;
	uint64_t retry_at = 0;
	bool backoff = false;

	if (!s)
		return 0;
	/* a forked child: the threads to stop are not here; its copy leaks */
	if (api_forked(s))
		return -ECHILD;
	open_stores_remove(s); /* stats and metrics answer -ESHUTDOWN from here */
	deadline = drain_timeout_ms > (UINT64_MAX - now) / 1000000ull ?
			   UINT64_MAX : now + drain_timeout_ms * 1000000ull;
	/*
	 * Drain: completions are applied so the index and files agree, and
	 * warm records not yet on disk are written (a parent's first) while
	 * the deadline lasts; what is left then is lost, and said.
	 */
	for (;;) {
		pthread_mutex_lock(&s->lock);
		if (s->engine) {
			coord_store_poll(&s->core, events, SEL_ARRAY_SIZE(events));
			if (sel_monotonic_ns() <= deadline)
				coord_store_write_dirty(&s->core);
			in_flight = coord_store_jobs_in_flight(&s->core);
			/*
			 * A failed write's record is tried again after the backoff,
			 * SEL_CLOSE_WRITE_RETRIES times: a disk that keeps failing
			 * does not hold the close to its deadline.
			 */
			backoff = s->core.warm.dirty_records > 0 &&
				  s->core.warm_write_retry_ns > sel_monotonic_ns();
			if (backoff && s->core.warm_write_retry_ns != retry_at) {
				retry_at = s->core.warm_write_retry_ns;
				retries++;
			}
		}
		pthread_mutex_unlock(&s->lock);
		/* A stopped transport never completes its jobs: no use waiting. */
		if ((in_flight == 0 && (!backoff || retries > SEL_CLOSE_WRITE_RETRIES)) ||
		    s->core.stopped || sel_monotonic_ns() > deadline)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (s->engine && s->core.warm.dirty_records > 0) {
		s->core.stats.warm_dirty_dropped += s->core.warm.dirty_records;
		sel_warn("store: %u warm records (%" PRIu64 " MiB) were not written to disk by "
			 "the close deadline (%" PRIu64 " ms) and are lost",
			 s->core.warm.dirty_records,
			 (s->core.warm.dirty_slots * s->core.warm.slot_bytes) >> 20,
			 drain_timeout_ms);
	}
	if (in_flight > 0 && !s->core.stopped) {
		/*
		 * A copy may still be writing into device ids or staging: keep
		 * every buffer and thread rather than free them under it. (After
		 * a transport stop, the jobs left are the peers'; closing the
		 * local engine below still waits for every local copy.)
		 */
		sel_error("store: %u jobs still running at the close deadline; "
			  "leaving the store's buffers and threads in place", in_flight);
		return SEL_ESTOPPED;
	}
	coord_fanout_close(s->fanout); /* the peers see rank zero's links end */
	for (uint32_t i = 0; s->peers && !s->fanout && i + 1 < s->cluster.world_size; i++) {
		if (s->peers[i].fd < 0)
			continue; /* 0 is a socket too, where the host closed stdin */
		/*
		 * A cluster without disk stores ends cleanly too; an open that
		 * failed after the formation ends without BYE, a failure to
		 * the peer (R-WIRE-23).
		 */
		if (s->opened)
			cluster_frame_write(s->peers[i].fd, &s->peers[i].seq.send,
					    CLUSTER_MSG_BYE, NULL, 0);
		close(s->peers[i].fd);
	}
	free(s->peers);
	shard_engine_close(s->engine);
	api_pool_detach(s, false); /* the engine no longer runs a transfer on the links */
	shard_device_close(s->device);
	rec_dir_close(s->dir);
	in_flight = s->core.stopped; /* report a stopped transport to the caller */
	if (s->core.generation)
		coord_store_destroy(&s->core);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return in_flight ? SEL_ESTOPPED : 0;
}

int sel_history_create(sel_store *s, const uint32_t *tokens, uint64_t count,
		       sel_history **out)
{
	sel_history *h;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!s || (!tokens && count > 0))
		return -EINVAL;
	if (api_forked(s))
		return -ECHILD;
	h = calloc(1, sizeof(*h));
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

	if (!s || !h || !hit || api_forked(s))
		return false;
	pthread_mutex_lock(&s->lock);
	/*
	 * The ticket is the history's own, written under the store's lock:
	 * sel_lookup takes a const history as it always has, and an engine
	 * calls it from its one model thread.
	 */
	found = s->core.pool_on ?
			coord_store_lookup_pool(&s->core, &h->history, resident,
						&((sel_history *)h)->ticket, hit) :
			coord_store_lookup(&s->core, &h->history, resident, hit);
	pthread_mutex_unlock(&s->lock);
	return found;
}

bool sel_lookup_pending(sel_store *s, const sel_history *h)
{
	bool pending;

	if (!s || !h || api_forked(s))
		return false;
	pthread_mutex_lock(&s->lock);
	pending = coord_store_lookup_pending(&s->core, &h->ticket);
	pthread_mutex_unlock(&s->lock);
	return pending;
}

int sel_fetch(sel_store *s, const struct sel_hit *hit, const uint32_t *page_ids,
	      uint32_t state_slot, uint64_t waiter, bool *joined)
{
	int ret;

	if (!joined)
		return -EINVAL;
	*joined = false;
	if (!hit || !page_ids)
		return -EINVAL;
	ret = api_lock(s);
	if (ret)
		return ret;
	ret = s->engine ? coord_store_fetch(&s->core, hit, page_ids, state_slot, waiter,
					    joined) :
			  SEL_ENOTFOUND;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_cancel(sel_store *s, uint64_t waiter)
{
	int ret = api_lock(s);

	if (ret)
		return ret;
	ret = coord_store_cancel(&s->core, waiter);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_touch(sel_store *s, const sel_history *h, uint64_t consumed)
{
	int ret;

	if (!h)
		return -EINVAL;
	ret = api_lock(s);
	if (ret)
		return ret;
	ret = coord_store_touch(&s->core, &h->history, consumed);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_gpu_hold(sel_store *s, uint64_t checkpoint, const sel_history *h, uint64_t consumed)
{
	int ret;

	if (!h)
		return -EINVAL;
	ret = api_lock(s);
	if (ret)
		return ret;
	ret = coord_store_gpu_hold(&s->core, checkpoint, &h->history, consumed);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_gpu_evicted(sel_store *s, uint64_t checkpoint)
{
	int ret = api_lock(s);

	if (ret)
		return ret;
	ret = coord_store_gpu_evicted(&s->core, checkpoint);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_gpu_evictions_lost(sel_store *s)
{
	int ret = api_lock(s);

	if (ret)
		return ret;
	ret = coord_store_gpu_evictions_lost(&s->core);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_export_pinned(sel_store *s, uint64_t export_id, const uint32_t *page_ids,
		      uint32_t page_count, uint32_t state_slot)
{
	int ret;

	if (!page_ids && page_count > 0)
		return -EINVAL;
	ret = api_lock(s);
	if (ret)
		return ret;
	ret = coord_store_export_pinned(&s->core, export_id, page_ids, page_count, state_slot);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_export_refuse(sel_store *s, uint64_t export_id, int reason)
{
	int ret = api_lock(s);

	if (ret)
		return ret;
	ret = coord_store_export_refuse(&s->core, export_id, reason);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int sel_store_publish(sel_store *s, const struct sel_publication *pub,
		      enum sel_outcome *outcome)
{
	int ret;

	if (!pub || !pub->history || !outcome)
		return -EINVAL;
	ret = api_lock(s);
	if (ret)
		return ret;
	ret = coord_store_publish(&s->core, &pub->history->history, pub, outcome);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* First wait after a lost session, and the most the doubling backoff waits. */
#define API_POOL_BACKOFF_MIN_MS 100u
#define API_POOL_BACKOFF_MAX_MS 5000u
/* How long one reconnect waits for the manager's answer (off the model thread). */
#define API_POOL_RECONNECT_MS 2000u

/* The reconnect thread: opens rank zero's new connection, which may wait its deadline. */
static void *api_pool_connect(void *arg)
{
	sel_store *s = arg;

	s->pool_new_result = shard_pool_link_open(s->pool_plan, s->pool_address,
						  s->pool_instance_id, API_POOL_RECONNECT_MS,
						  &s->pool_new_link, s->pool_new_why,
						  sizeof(s->pool_new_why));
	atomic_store(&s->pool_thread_done, true);
	return NULL;
}

/* The next try after the backoff, which doubles up to its maximum. */
static void api_pool_retry_later(sel_store *s)
{
	s->pool_retry_ns = sel_monotonic_ns() + (uint64_t)s->pool_backoff_ms * 1000000ull;
	s->pool_backoff_ms = s->pool_backoff_ms * 2 > API_POOL_BACKOFF_MAX_MS ?
				     API_POOL_BACKOFF_MAX_MS : s->pool_backoff_ms * 2;
	s->pool_state = API_POOL_WAIT;
}

/* Every rank reattached: the pool serves again, knowing nothing of what it held. */
static void api_pool_resume(sel_store *s)
{
	struct pool_client *client = shard_pool_link_client(s->pool_link);
	struct coord_pool_session session;
	struct coord_pool_ops ops;
	const uint8_t *arena;
	uint64_t arena_bytes;
	char ignored[200];
	bool same_host = pool_arena_map(client, &arena, &arena_bytes, ignored,
					sizeof(ignored)) == 0;
	int ret;

	coord_pool_client_session_fill(&s->pool_session, &session, &ops);
	ret = coord_store_set_pool(&s->core, true);
	if (!ret)
		ret = coord_store_set_pool_lookups(&s->core, &ops,
						   coord_pool_grace_ns(same_host,
								       pool_client_rtt_us(client)));
	if (ret) {
		coord_store_set_pool(&s->core, false);
		sel_warn("pool %s: reattached but could not resume: %s", s->pool_address,
			 sel_strerror(ret));
		api_pool_retry_later(s);
		return;
	}
	s->pool_state = API_POOL_ATTACHED;
	s->pool_backoff_ms = API_POOL_BACKOFF_MIN_MS;
	sel_info("pool %s: reattached as \"%s\" (%u ranks)", s->pool_address,
		 pool_client_facts(client)->name, s->cluster.world_size);
}

/*
 * Rank zero's new connection is open: it replaces the lost one (no put or
 * claim is in flight, so no transfer uses either), then every peer
 * reattaches through the fan-out (R-WIRE-21: a second attach replaces a
 * peer's connection), answered through a later poll.
 */
static void api_pool_swap(sel_store *s)
{
	struct shard_pool_conn conn;
	int ret;

	shard_pool_link_conn(s->pool_new_link, &conn);
	shard_engine_set_pool(s->engine, NULL, NULL);
	ret = shard_engine_set_pool(s->engine, &conn, &s->core.namespace_id);
	SEL_ASSERT(ret == 0); /* the engine's pool state exists since the first attach */
	/*
	 * The old link closes on the transfer thread: undoing its arena's
	 * registration (cuMemHostUnregister) and joining its I/O thread must
	 * not hold up the model thread. The reconnect waited for the last
	 * retired link to close, so there is room; were there none, closing
	 * here is still correct, only slower.
	 */
	if (shard_engine_retire(s->engine, shard_pool_link_close_ctx, s->pool_link) != 0)
		shard_pool_link_close(s->pool_link);
	s->pool_link = s->pool_new_link;
	s->pool_new_link = NULL;
	s->pool_session.client = shard_pool_link_client(s->pool_link);
	if (!s->fanout) {
		api_pool_resume(s);
		return;
	}
	if (coord_store_job_reserve(&s->core, &s->pool_attach_job) != 0) {
		api_pool_retry_later(s); /* every job id taken: the next try */
		return;
	}
	coord_pool_expect_attach(s->pool_driver, s->pool_attach_job);
	ret = coord_fanout_pool_attach(s->fanout, s->pool_attach_job, s->pool_instance_id,
				       s->pool_address);
	if (ret) {
		/* its completion never comes: the reserved id is free again */
		coord_pool_attach_result(s->pool_driver, &ret, s->pool_new_why,
					 sizeof(s->pool_new_why));
		coord_store_job_unreserve(&s->core, s->pool_attach_job);
		api_pool_retry_later(s);
		return;
	}
	s->pool_state = API_POOL_RANKS;
}

/*
 * A session whose connection was lost turns the pool off, with one
 * warning, and reconnects in the background: puts and claims in flight end
 * through the driver with the connection's failure, the local tiers serve,
 * and once none is in flight a thread opens rank zero's new connection
 * (backoff from 100 ms doubling to 5 s between tries), then every peer
 * reattaches. The model thread never waits: it only reads the client's
 * status and the thread's flag.
 */
static void api_pool_check(sel_store *s)
{
	char why[256] = "";
	int result;

	switch (s->pool_state) {
	case API_POOL_ATTACHED:
		if (!s->core.pool_on ||
		    pool_client_status(shard_pool_link_client(s->pool_link), why,
				       sizeof(why)) == 0)
			return;
		coord_store_set_pool(&s->core, false);
		sel_warn("pool %s: connection lost: %s; the store runs on its local tiers and "
			 "reconnects", s->pool_address, why[0] ? why : "no reason given");
		s->pool_backoff_ms = API_POOL_BACKOFF_MIN_MS;
		api_pool_retry_later(s);
		return;
	case API_POOL_WAIT:
		if (sel_monotonic_ns() < s->pool_retry_ns || coord_pool_busy(s->pool_driver) ||
		    shard_engine_retiring(s->engine))
			return;
		atomic_store(&s->pool_thread_done, false);
		s->pool_new_link = NULL;
		s->pool_new_why[0] = '\0';
		if (pthread_create(&s->pool_thread, NULL, api_pool_connect, s) != 0) {
			api_pool_retry_later(s);
			return;
		}
		s->pool_state = API_POOL_CONNECTING;
		return;
	case API_POOL_CONNECTING:
		if (!atomic_load(&s->pool_thread_done))
			return;
		pthread_join(s->pool_thread, NULL);
		if (s->pool_new_result) {
			sel_debug("pool %s: reconnect failed: %s", s->pool_address,
				  s->pool_new_why);
			api_pool_retry_later(s);
			return;
		}
		api_pool_swap(s);
		return;
	case API_POOL_RANKS:
		if (coord_pool_attach_result(s->pool_driver, &result, why, sizeof(why)) == 0)
			return;
		coord_store_job_unreserve(&s->core, s->pool_attach_job);
		if (result) {
			sel_debug("pool %s: a peer did not reattach: %s", s->pool_address, why);
			api_pool_retry_later(s);
			return;
		}
		api_pool_resume(s);
		return;
	}
}

uint32_t sel_poll(sel_store *s, struct sel_event *events, uint32_t max)
{
	uint32_t n = 0;

	if (!s || (!events && max > 0) || api_forked(s))
		return 0;
	pthread_mutex_lock(&s->lock);
	if (s->pool_link)
		api_pool_check(s);
	if (s->engine)
		n = coord_store_poll(&s->core, events, max);
	pthread_mutex_unlock(&s->lock);
	return n;
}

static void stats_copy(sel_store *s, struct sel_stats *out)
{
	pthread_mutex_lock(&s->lock);
	s->core.stats.disk_bytes = s->core.used_bytes;
	*out = s->core.stats;
	pthread_mutex_unlock(&s->lock);
}

int sel_store_stats(sel_store *s, struct sel_stats *out)
{
	int ret;

	if (!out)
		return -EINVAL;
	ret = monitor_enter(s);
	if (ret) {
		memset(out, 0, sizeof(*out));
		return ret;
	}
	stats_copy(s, out);
	monitor_leave(s);
	return 0;
}

static int metrics_write(sel_store *s, char *buf, size_t size)
{
	struct coord_metrics_staging staging = { 0 };
	struct shard_staging_stats pool;
	struct shard_engine_stats engine;
	struct shard_warm_stats warm;
	struct sel_stats st;

	stats_copy(s, &st);
	if (s->engine) {
		shard_engine_staging_stats(s->engine, &pool);
		shard_engine_stats(s->engine, &engine);
		shard_engine_warm_stats(s->engine, &warm);
		staging = (struct coord_metrics_staging){
			.slots_total = pool.slots_total,
			.slots_in_use = pool.slots_total - pool.slots_free,
			.slots_intake = pool.slots_intake, .exhausted = pool.exhausted,
			.store_yields = engine.store_yields,
			.warm_fallbacks = warm.store_fallbacks,
			.warm_read_fallbacks = warm.read_fallbacks };
	}
	return coord_metrics_write(buf, size, &st, s->engine ? &staging : NULL, s->fanout,
				   s->cluster.world_size);
}

int sel_store_metrics(sel_store *s, char *buf, size_t size)
{
	int n;

	if (!buf && size > 0)
		return -EINVAL;
	n = monitor_enter(s);
	if (n)
		return n;
	n = metrics_write(s, buf, size);
	monitor_leave(s);
	return n;
}

int sel_bench_noop(sel_store *s)
{
	int ret;

	pthread_mutex_lock(&s->lock);
	ret = s->engine ? coord_store_noop(&s->core) : SEL_ESTOPPED;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void sel_bench_noops(sel_store *s, uint64_t *done, uint64_t *failed)
{
	pthread_mutex_lock(&s->lock);
	*done = s->core.noops_done;
	*failed = s->core.noops_failed;
	pthread_mutex_unlock(&s->lock);
}

void sel_bench_startup(sel_store *s, struct sel_bench_startup *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->startup;
	pthread_mutex_unlock(&s->lock);
}
