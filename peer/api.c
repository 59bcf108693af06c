/*
 * The peer side of the public API (include/selene/store.h): a rank other
 * than zero opens its own storage, joins rank zero, applies the startup
 * agreement, and runs the peer agent on a thread of its own.
 */
#include "selene/store.h"

#include "cluster/link.h"
#include "cluster/resolve.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "peer/agent.h"
#include "peer/bench.h"
#include "peer/join.h"
#include "record/dir.h"
#include "shard/config.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct sel_peer {
	struct sel_cluster cluster;
	struct rec_geometry geometry;
	struct rec_identity namespace_id;
	struct shard_pool_plan *pool_plan; /* with a pool configured and a disk store */
	struct rec_dir *dir;
	struct shard_device *device;
	struct shard_engine *engine;
	struct cluster_sequences seq;
	int fd;          /* ours until the agent starts */
	int agent_fd;    /* the same socket, handed to the agent (its link closes it) */
	int control_fd;  /* a dup of it, to end the link from sel_peer_stop */
	pthread_t thread;
	bool running;
	bool undrained;  /* jobs outlived the drain: keep every buffer */
	int result;
	char why[256];
	struct sel_bench_peer_startup startup;
	uint32_t fork_generation; /* sel_fork_generation at start (peer_forked) */
};

/*
 * Whether the caller is not the process that started p: a child of fork()
 * has none of its threads, so wait and stop are refused there (-ECHILD).
 */
static bool peer_forked(const struct sel_peer *p)
{
	return p->fork_generation != sel_fork_generation();
}

/*
 * Binds fd to this rank's announced address, where the cluster names one:
 * rank zero accepts a peer only from it, and on a multi-homed host the
 * route's default source address could be another.
 */
static int peer_bind_source(int fd, const struct sel_cluster *c, int family)
{
	const char *mine = c->rank_addresses ? c->rank_addresses[c->rank] : NULL;
	struct sockaddr_storage addr = { 0 };
	struct sockaddr_in *v4 = (struct sockaddr_in *)&addr;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&addr;
	socklen_t len;

	if (!mine)
		return 0;
	if (family == AF_INET && inet_pton(AF_INET, mine, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		len = sizeof(*v4);
	} else if (family == AF_INET6 && inet_pton(AF_INET6, mine, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		len = sizeof(*v6);
	} else {
		return 0; /* another family: rank zero will say so if it minds */
	}
	return bind(fd, (struct sockaddr *)&addr, len) == 0 ? 0 : -errno;
}

/*
 * connect() that gives up at deadline: a blocking one waits out the
 * kernel's SYN retries (about two minutes) against a listener whose accept
 * queue is full, whatever the join timeout. The socket is left blocking,
 * as the join's reads and writes expect. Returns 0 or a negative errno
 * (-ETIMEDOUT at the deadline).
 */
static int connect_until(int fd, const struct sockaddr *addr, socklen_t len,
			 uint64_t deadline)
{
	int flags = fcntl(fd, F_GETFL), ret = 0;
	bool pending = false;

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
		return -errno;
	/* EINTR: the connection goes on in the background, as EINPROGRESS */
	if (connect(fd, addr, len) != 0) {
		pending = errno == EINPROGRESS || errno == EINTR;
		ret = pending ? 0 : -errno;
	}
	while (pending) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		uint64_t now = sel_monotonic_ns(), left_ms;
		int error = 0, n;
		socklen_t error_len = sizeof(error);

		if (now >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		left_ms = (deadline - now + 999999) / 1000000;
		n = poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
		if (n == 0 || (n < 0 && errno == EINTR))
			continue;
		pending = false;
		if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_len) != 0)
			ret = -errno;
		else
			ret = -error;
	}
	if (fcntl(fd, F_SETFL, flags) != 0 && ret == 0)
		ret = -errno;
	return ret;
}

/*
 * Connects to rank zero, retrying until deadline: it may start later. Once
 * this rank reached it (reached), a refused connection is final: rank zero
 * is gone, and waiting out the deadline would only delay the failure.
 */
static int peer_connect(const struct sel_cluster *c, uint64_t deadline, bool reached,
			char *err, size_t err_size)
{
	struct addrinfo *ai = NULL;
	char port[8];
	int ret, fd = -1;

	snprintf(port, sizeof(port), "%u", c->coordinator_port);
	ret = cluster_resolve(c->coordinator_host, port, deadline, &ai, err, err_size);
	if (ret)
		return ret;
	for (;;) {
		ret = SEL_FAILPOINT(SEL_FP_PEER_SOCKET);
		fd = ret < 0 ? -1 : socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			ret = ret < 0 ? ret : -errno;
			freeaddrinfo(ai);
			return sel_fail(ret, err, err_size, "cannot open a socket to reach rank "
					 "zero at %s:%u: %s", c->coordinator_host,
					 c->coordinator_port, sel_strerror(ret));
		}
		ret = peer_bind_source(fd, c, ai->ai_family);
		if (ret) {
			close(fd);
			freeaddrinfo(ai);
			/* only an announced address is ever bound: rank_addresses is set */
			return sel_fail(ret, err, err_size, "cannot use this rank's address %s: %s",
					 c->rank_addresses[c->rank], strerror(-ret));
		}
		ret = connect_until(fd, ai->ai_addr, ai->ai_addrlen, deadline);
		if (ret == 0)
			break;
		close(fd);
		fd = -1;
		if (sel_monotonic_ns() > deadline || (reached && ret == -ECONNREFUSED))
			break;
		usleep(50 * 1000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return sel_fail(ret, err, err_size, "cannot reach rank zero at %s:%u: %s%s",
				 c->coordinator_host, c->coordinator_port, strerror(-ret),
				 reached ? " (it was reached before: it stopped)" : "");
	return fd;
}

/* The socket's receive timeout: what is left until deadline (0: none). */
static void peer_receive_timeout(int fd, uint64_t deadline)
{
	uint64_t now = sel_monotonic_ns(), left_ms = now < deadline ?
							   (deadline - now) / 1000000 + 1 : 1;
	struct timeval tv = { .tv_sec = (time_t)(left_ms / 1000),
			      .tv_usec = (suseconds_t)(left_ms % 1000) * 1000 };

	if (deadline == 0)
		tv = (struct timeval){ 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/*
 * Connects and runs the startup (peer/join.h). A connection that breaks
 * before WELCOME (rank zero dropped it as one of too many handshakes, or a
 * stranger's storm delayed it past its deadline) is tried again until the
 * join timeout; a refusal or a break after WELCOME is final. Returns the
 * joined socket, or a negative code with err.
 */
static int peer_join(struct sel_peer *p, const struct cluster_identity *me,
		     const struct rec_scan *scan, uint64_t *agreed, char *err, size_t err_size)
{
	uint64_t deadline = sel_monotonic_ns() +
			    (uint64_t)(p->cluster.join_timeout_ms ? p->cluster.join_timeout_ms :
					60000) * 1000000ull;
	bool reached = false;

	for (;;) {
		int fd = peer_connect(&p->cluster, deadline, reached, err, err_size), ret;

		if (fd < 0)
			return fd;
		reached = true;
		/* rank zero answers (WELCOME, or REFUSE naming the missing rank) by
		 * its own deadline: wait a little longer than it, not less */
		peer_receive_timeout(fd, deadline + CLUSTER_FAILURE_NOTICE_MS * 1000000ull);
		p->seq = (struct cluster_sequences){ 0 };
		ret = peer_join_cluster(fd, p->cluster.secret, me, p->dir, scan, &p->seq, agreed,
					err, err_size);
		if (ret == 0)
			return fd;
		close(fd);
		/* CHALLENGE is frame 0 from rank zero, WELCOME frame 1 */
		/* a transport error before WELCOME costs nothing: join again */
		if ((ret != -ECONNRESET && ret != -EPIPE && ret != -EIO) || p->seq.recv >= 2 ||
		    sel_monotonic_ns() > deadline)
			return ret;
		sel_warn("rank %u: the join connection broke before WELCOME (%s); joining "
			 "again", p->cluster.rank, err);
	}
}

/*
 * This rank failed at startup: tells rank zero, proving the secret so that
 * it believes it, for at most CLUSTER_FAILURE_NOTICE_MS; rank zero then
 * stops the formation and every other rank learns it at once.
 */
static void peer_tell_failure(struct sel_peer *p, const struct cluster_identity *me,
			      const char *failure)
{
	uint64_t deadline = sel_monotonic_ns() + CLUSTER_FAILURE_NOTICE_MS * 1000000ull;
	char text[CLUSTER_REFUSE_TEXT_BYTES_MAX + 1], why[256];
	struct cluster_sequences seq = { 0 };
	int fd = peer_connect(&p->cluster, deadline, false, why, sizeof(why));

	if (fd < 0)
		return;
	peer_receive_timeout(fd, deadline);
	snprintf(text, sizeof(text), "%s", failure);
	if (cluster_join_peer_fail(fd, p->cluster.secret, me, &seq, text, why, sizeof(why)))
		sel_warn("rank %u: could not tell rank zero of the failure: %s", me->rank, why);
	close(fd);
}

/*
 * A peer without a disk store runs no jobs: it holds its link until rank
 * zero ends it (BYE, then end of file, is the clean end). Rank zero sends
 * nothing meanwhile, so TCP keepalive finds a rank zero whose host is gone.
 */
static int peer_wait_diskless(struct sel_peer *p, uint32_t silence_ms)
{
	uint8_t buf[CLUSTER_JOIN_FRAME_BYTES_MAX];
	struct cluster_frame_header h;
	bool bye = false;

	peer_receive_timeout(p->agent_fd, 0);
	cluster_socket_keepalive(p->agent_fd, silence_ms);
	for (;;) {
		int ret = cluster_frame_read(p->agent_fd, buf, sizeof(buf), &p->seq.recv, &h,
					     p->why, sizeof(p->why));

		if (ret == 1) {
			bye = bye || h.type == CLUSTER_MSG_BYE;
			continue;
		}
		close(p->agent_fd);
		if (ret == 0 && bye)
			return 0;
		if (ret == 0)
			snprintf(p->why, sizeof(p->why), "rank zero closed the link without BYE");
		return ret == 0 ? -ECONNRESET : ret;
	}
}

static void *peer_main(void *arg)
{
	struct sel_peer *p = arg;
	uint32_t silence = p->cluster.silence_timeout_ms ? p->cluster.silence_timeout_ms : 10000;

	if (!p->engine) {
		p->result = peer_wait_diskless(p, silence);
		return NULL;
	}
	p->result = peer_agent_run(&(struct peer_agent_options){
		.fd = p->agent_fd, .seq = p->seq, .engine = p->engine, .geometry = &p->geometry,
		.namespace_id = &p->namespace_id, .heartbeat_ms = silence / 4,
		.silence_timeout_ms = silence,
		.drain_timeout_ms = p->cluster.job_timeout_ms, .pool_plan = p->pool_plan },
		&p->undrained, p->why,
		sizeof(p->why));
	if (p->result)
		sel_error("rank %u: the link to rank zero ended: %s", p->cluster.rank, p->why);
	return NULL;
}

/* This rank's directory (locked, scanned), device and engine. */
static int peer_open_storage(struct sel_peer *p, const struct sel_store_config *c,
			     struct rec_scan *scan, uint64_t *limit, char *err, size_t err_size)
{
	struct rec_identity model;
	struct rec_dir_options dir_options = { .base_path = c->dir,
					       .namespace_id = &p->namespace_id,
					       .geometry = &p->geometry, .durable = c->durable };
	struct shard_planes planes;
	int ret;

	uint64_t step;

	memcpy(model.bytes, c->model_identity, sizeof(model.bytes));
	rec_namespace_identity(&p->namespace_id, &model, (enum rec_state_mode)c->state_mode);
	ret = rec_dir_open(&dir_options, &p->dir, err, err_size);
	if (ret)
		return ret;
	step = sel_monotonic_ns();
	ret = rec_dir_scan(p->dir, scan);
	p->startup.scan_ns = sel_monotonic_ns() - step;
	if (ret)
		return rec_dir_scan_failed(p->dir, scan, ret, err, err_size);
	p->startup.scan_headers_read = scan->headers_read;
	p->startup.scan_cache_hits = scan->cache_hits;
	*limit = c->disk_limit_bytes;
	if (c->disk_limit_bytes == SEL_DISK_LIMIT_AUTO) {
		ret = shard_config_auto_limit(rec_dir_path(p->dir), scan->bytes,
					      rec_geometry_file_bytes(&p->geometry, 1, true), limit,
					      err, err_size);
		if (ret)
			return ret;
	}
	ret = shard_device_open(c->device ? c->device : "auto", c->device_ordinal, &p->device,
				err, err_size);
	if (ret)
		return ret;
	shard_config_planes(c, &p->geometry, &planes);
	return shard_engine_open(&(struct shard_engine_options){
		.geometry = &p->geometry, .dir = p->dir, .device = p->device, .planes = &planes,
		.register_pool = true, .warm_bytes = c->warm_bytes }, &p->engine, err, err_size);
}

/* One line that says how this peer runs (docs/DESIGN.md section 9). */
static void peer_startup_line(const struct sel_peer *p, uint64_t scanned, uint64_t kept,
			      uint64_t agreed_limit)
{
	struct shard_engine_stats st;
	struct sockaddr_storage addr;
	socklen_t len = sizeof(addr);
	char mine[INET6_ADDRSTRLEN] = "?", warm[128], staging[96];

	shard_engine_stats(p->engine, &st);
	shard_engine_describe_warm(p->engine, warm, sizeof(warm));
	shard_engine_describe_staging(p->engine, staging, sizeof(staging));
	if (getsockname(p->control_fd, (struct sockaddr *)&addr, &len) == 0)
		sel_address_text(&addr, mine, sizeof(mine));
	sel_info("peer: %s; rank %u of %u; device %s; I/O %s, %u kernel workers, %u checksum "
		 "threads, %u stores at once; transport rank zero at %s:%u "
		 "from %s; %s; %s; records %llu scanned, %llu kept (agreement "
		 "applied); disk limit %llu bytes (agreed)", rec_dir_path(p->dir),
		 p->cluster.rank, p->cluster.world_size, p->device->ops->name, st.disk_engine,
		 st.io_workers, st.checksum_threads, st.stores_max,
		 p->cluster.coordinator_host, p->cluster.coordinator_port, mine,
		 staging, warm, (unsigned long long)scanned,
		 (unsigned long long)kept, (unsigned long long)agreed_limit);
}

/* sel_peer_start's work, with a reason buffer of at least 256 bytes. */
static int peer_start(const struct sel_store_config *c, sel_peer **out, char *err,
		      size_t err_size)
{
	struct sel_peer *p;
	struct rec_scan scan = { 0 };
	struct cluster_identity me;
	uint64_t limit = 0, agreed, scanned = 0, kept = 0;
	uint64_t start = sel_monotonic_ns(), step;
	bool has_disk_store;
	int ret;

	if (!out)
		return sel_fail(-EINVAL, err, err_size, "no place for the peer (out is NULL)");
	*out = NULL;
	ret = sel_failpoints_from_env(err, err_size);
	if (!ret)
		ret = shard_config_validate(c, err, err_size);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return sel_fail(-ENOMEM, err, err_size, "out of memory");
	p->fd = p->control_fd = -1;
	p->fork_generation = sel_fork_generation();
	if (!c->cluster || c->cluster->rank == 0 || c->cluster->rank >= c->cluster->world_size) {
		ret = sel_fail(-EINVAL, err, err_size, "a peer needs a cluster description with "
				"a rank from 1 to world size - 1");
		goto err_stop;
	}
	p->cluster = *c->cluster;
	has_disk_store = c->disk_limit_bytes != 0;
	sel_log_set_rank(p->cluster.rank);
	ret = shard_config_geometry(c, p->cluster.rank, p->cluster.world_size, &p->geometry,
				    err, err_size);
	if (ret)
		goto err_stop; /* without a geometry this rank cannot prove who it is */
	if (has_disk_store)
		ret = peer_open_storage(p, c, &scan, &limit, err, err_size);
	if (!ret && has_disk_store && c->pool) {
		/* a plan that failed is kept: the attach answers its reason (R-WIRE-21) */
		p->pool_plan = malloc(sizeof(*p->pool_plan));
		if (!p->pool_plan)
			ret = sel_fail(-ENOMEM, err, err_size, "out of memory");
		else
			shard_pool_plan_init(p->pool_plan, c, p->cluster.rank,
					     p->cluster.world_size, &p->namespace_id);
	}
	kept = scan.record_count;
	scanned = kept + scan.invalid_dropped + scan.orphans_dropped + scan.page_only_dropped;
	me = (struct cluster_identity){
		.rank = p->cluster.rank, .world_size = p->cluster.world_size,
		.fingerprint = p->geometry.fingerprint, .layout_digest = p->geometry.layout_digest,
		.has_disk_store = has_disk_store, .disk_limit_bytes = limit,
		.warm_bytes = c->warm_bytes, .warm_policy = c->warm_policy,
		.marked = p->dir && rec_dir_scan_marked(p->dir, &scan) };
	if (ret) {
		peer_tell_failure(p, &me, err);
		goto err_stop;
	}
	step = sel_monotonic_ns();
	p->fd = peer_join(p, &me, has_disk_store ? &scan : NULL, &agreed, err, err_size);
	p->startup.join_ns = sel_monotonic_ns() - step;
	rec_scan_free(&scan);
	if (p->fd < 0) {
		ret = p->fd;
		goto err_stop;
	}
	/* close-on-exec like the socket: a host's exec must not inherit the link */
	ret = SEL_FAILPOINT(SEL_FP_PEER_DUP);
	p->control_fd = ret < 0 ? -1 : fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
	if (p->control_fd < 0) {
		ret = ret < 0 ? ret : -errno;
		sel_fail(ret, err, err_size, "cannot duplicate the link's socket to rank zero: %s",
			 sel_strerror(ret));
		goto err_stop; /* rank zero sees the link end without a word */
	}
	p->agent_fd = p->fd;
	ret = sel_thread_start(&p->thread, peer_main, p);
	if (ret) {
		sel_fail(ret, err, err_size, "cannot start the peer agent");
		goto err_stop;
	}
	p->running = true;
	p->fd = -1; /* the agent's now: its link closes it */
	if (has_disk_store)
		peer_startup_line(p, scanned, kept, agreed);
	else
		sel_info("peer: rank %u of %u joined without a disk store", p->cluster.rank,
			 p->cluster.world_size);
	p->startup.start_ns = sel_monotonic_ns() - start;
	*out = p;
	return 0;
err_stop:
	rec_scan_free(&scan);
	sel_peer_stop(p);
	return ret;
}

int sel_peer_start(const struct sel_store_config *c, sel_peer **out, char *err,
		   size_t err_size)
{
	struct sel_reason reason;

	if (!err && err_size > 0)
		return -EINVAL; /* nowhere to say why: err_size promises a buffer */
	/* no message asked for, or a small buffer: rank zero is still told all of it */
	sel_reason_begin(&reason, &err, &err_size);
	return sel_reason_end(&reason, peer_start(c, out, err, err_size));
}

int sel_peer_wait(sel_peer *p)
{
	if (!p)
		return -EINVAL;
	if (peer_forked(p))
		return -ECHILD;
	if (p->running) {
		pthread_join(p->thread, NULL);
		p->running = false;
	}
	return p->result;
}

int sel_peer_stop(sel_peer *p)
{
	if (!p)
		return 0;
	/* a forked child: the agent thread is not here; its copy leaks */
	if (peer_forked(p))
		return -ECHILD;
	if (p->running) {
		shutdown(p->control_fd, SHUT_RDWR);
		sel_peer_wait(p);
	} else if (p->fd >= 0) {
		close(p->fd); /* never handed to the agent */
	}
	if (p->control_fd >= 0)
		close(p->control_fd);
	if (p->undrained) {
		/* Copies may still land in these buffers: leave them, and the peer. */
		sel_error("rank %u: stopping without freeing the engine: %s", p->cluster.rank,
			  p->why);
		return SEL_ESTOPPED;
	}
	shard_engine_close(p->engine);
	shard_device_close(p->device);
	rec_dir_close(p->dir);
	if (p->pool_plan)
		shard_pool_plan_destroy(p->pool_plan);
	free(p->pool_plan);
	free(p);
	return 0;
}

void sel_bench_peer_startup(const sel_peer *p, struct sel_bench_peer_startup *out)
{
	*out = p->startup;
}
