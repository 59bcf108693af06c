/* Rank zero forming the cluster: see cluster.h. */
#include "coordinator/cluster.h"

#include "cluster/summary.h"
#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "coordinator/agreement.h"
#include "record/file.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One connection in the join: a stranger until it proves the secret. */
struct form_conn {
	int fd;
	uint64_t deadline_ns;    /* its handshake's */
	bool proving;            /* HELLO answered with CHALLENGE: PROOF next */
	struct cluster_frame_in in;
	struct cluster_joiner joiner;
	char from[INET6_ADDRSTRLEN + 8];
};

/* Rank zero's join: every peer authenticated, strangers costing a log line. */
struct form_join {
	const struct coord_form_options *o;
	struct coord_peer *peers;
	struct cluster_joiner *joiners;
	struct cluster_frame_in *joined_in; /* per peer: a REFUSE or EOF before WELCOME */
	struct form_conn pending[CLUSTER_JOIN_PENDING_MAX];
	uint32_t pending_count;
	uint32_t joined;
	struct pollfd *fds;                 /* listener, pending, joined peers */
	uint64_t log_window_ns;
	uint32_t log_lines;
	uint64_t log_suppressed;
	uint64_t strangers_dropped;
	uint64_t accept_retry_ns; /* the listener is left alone until then */
	bool accept_failing;      /* said so; cleared by the next accept */
	char last_refusal[300];
};

static uint64_t ms_until(uint64_t now, uint64_t deadline)
{
	return now >= deadline ? 0 : (deadline - now + 999999) / 1000000;
}

/* "address:port" of a socket's other end, for the log. */
static void peer_address(const struct sockaddr_storage *addr, char *out, size_t size)
{
	char text[INET6_ADDRSTRLEN];
	unsigned port = addr->ss_family == AF_INET ?
				ntohs(((const struct sockaddr_in *)addr)->sin_port) :
			addr->ss_family == AF_INET6 ?
				ntohs(((const struct sockaddr_in6 *)addr)->sin6_port) : 0;

	sel_address_text(addr, text, sizeof(text));
	snprintf(out, size, "%s:%u", text, port);
}

/*
 * Accepts a connection the listener has now, non-blocking, without ever
 * waiting: the listener is the caller's and may be a blocking socket.
 */
static int accept_ready(int listen_fd, struct sockaddr_storage *addr, socklen_t *len)
{
	struct pollfd p = { .fd = listen_fd, .events = POLLIN };

	if (poll(&p, 1, 0) != 1) {
		errno = EAGAIN;
		return -1;
	}
	return accept4(listen_fd, (struct sockaddr *)addr, len, SOCK_CLOEXEC | SOCK_NONBLOCK);
}

/* A stranger's connection ends: a log line, at most a few a second. */
static void form_drop(struct form_join *j, uint32_t index, const char *why)
{
	struct form_conn *c = &j->pending[index];
	uint64_t now = sel_monotonic_ns();

	if (now - j->log_window_ns >= 1000000000ull) {
		if (j->log_suppressed)
			sel_warn("join: %llu more connections dropped in the last second",
				 (unsigned long long)j->log_suppressed);
		j->log_window_ns = now;
		j->log_lines = 0;
		j->log_suppressed = 0;
	}
	if (j->log_lines++ < CLUSTER_JOIN_LOG_PER_SECOND)
		sel_warn("join: dropped a connection from %s: %s", c->from, why);
	else
		j->log_suppressed++;
	if (c->proving)
		snprintf(j->last_refusal, sizeof(j->last_refusal), "from %s: %s", c->from, why);
	j->strangers_dropped++;
	close(c->fd);
	j->pending[index] = j->pending[--j->pending_count];
}

/* Accepts what the listener has; a full table drops its oldest stranger. */
static void form_accept(struct form_join *j, uint64_t now)
{
	for (uint32_t n = 0; n < CLUSTER_JOIN_PENDING_MAX; n++) {
		struct sockaddr_storage addr;
		socklen_t len = sizeof(addr);
		struct form_conn *c;
		int fd = accept_ready(j->o->listen_fd, &addr, &len);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
			    errno == ECONNABORTED)
				return;
			if (j->pending_count > 0) {
				form_drop(j, 0, "out of descriptors for new connections");
				return;
			}
			/*
			 * Nothing to give back, and the listener stays readable:
			 * polling it again at once would spin until the deadline.
			 */
			if (!j->accept_failing)
				sel_warn("join: cannot accept a connection (%s); trying again "
					 "every %u ms", strerror(errno),
					 CLUSTER_JOIN_ACCEPT_RETRY_MS);
			j->accept_failing = true;
			j->accept_retry_ns = now + CLUSTER_JOIN_ACCEPT_RETRY_MS * 1000000ull;
			return;
		}
		j->accept_failing = false;
		if (j->pending_count == CLUSTER_JOIN_PENDING_MAX) {
			/* The oldest that has not even sent a HELLO, else the oldest. */
			uint32_t victim = 0;

			for (uint32_t i = 0; i < j->pending_count; i++)
				if (!j->pending[i].proving &&
				    (j->pending[victim].proving ||
				     j->pending[i].deadline_ns < j->pending[victim].deadline_ns))
					victim = i;
			form_drop(j, victim, "too many handshakes at once; dropped the oldest");
		}
		c = &j->pending[j->pending_count++];
		memset(c, 0, sizeof(*c));
		c->fd = fd;
		c->deadline_ns = now + CLUSTER_JOIN_HANDSHAKE_MS * 1000000ull;
		peer_address(&addr, c->from, sizeof(c->from));
	}
}

/* A peer proved the secret: the policy, then it is the rank's. <0: fatal. */
static int form_admit(struct form_join *j, uint32_t index, char *err, size_t err_size)
{
	struct form_conn *c = &j->pending[index];
	uint32_t rank = c->joiner.hello.rank;
	char why[256];
	int ret;

	if (j->peers[rank - 1].fd >= 0) {
		cluster_join_refuse(c->fd, &c->joiner.seq, CLUSTER_REFUSE_RANK,
				    "that rank already joined");
		return sel_fail(SEL_EMISMATCH, err, err_size,
				 "join refused: rank %u joined twice (again from %s)", rank, c->from);
	}
	ret = cluster_join_check(c->fd, &j->o->policy, &c->joiner, why, sizeof(why));
	if (ret)
		/* The rank itself is misconfigured: no formation can succeed. */
		return sel_fail(ret, err, err_size, "join refused: %s", why);
	j->peers[rank - 1] = (struct coord_peer){ .fd = c->fd, .rank = rank,
						  .seq = c->joiner.seq };
	j->joiners[rank - 1] = c->joiner;
	j->joined++;
	j->pending[index] = j->pending[--j->pending_count];
	return 0;
}

/* Moves one stranger's handshake on. Returns <0 only for a fatal failure. */
static int form_step(struct form_join *j, uint32_t index, char *err, size_t err_size)
{
	struct form_conn *c = &j->pending[index];
	const uint8_t *payload = c->in.bytes + CLUSTER_FRAME_HEADER_BYTES;
	uint16_t want = c->proving ? CLUSTER_MSG_PROOF : CLUSTER_MSG_HELLO;
	char why[256] = "";
	int ret = cluster_frame_in_read(c->fd, &c->in, &c->joiner.seq.recv, why, sizeof(why));

	if (ret == 0)
		return 0;
	if (ret < 0) {
		form_drop(j, index, why);
		return 0;
	}
	c->in.used = 0;
	if (c->in.header.type != want) {
		snprintf(why, sizeof(why), "expected %s, got %s", cluster_msg_name(want),
			 cluster_msg_name(c->in.header.type));
		form_drop(j, index, why);
		return 0;
	}
	if (!c->proving) {
		ret = cluster_join_challenge(c->fd, payload, c->in.header.payload_length,
					     j->o->policy.world_size, &c->joiner, why, sizeof(why));
		c->proving = ret == 0;
	} else {
		ret = cluster_join_verify(c->fd, j->o->secret, &c->joiner, payload,
					  c->in.header.payload_length, why, sizeof(why));
		if (!ret)
			return form_admit(j, index, err, err_size);
	}
	if (ret)
		form_drop(j, index, why);
	return 0;
}

/* A joined peer speaks before WELCOME: its startup failed, or it left. */
static int form_joined_event(struct form_join *j, struct coord_peer *p, char *err,
			     size_t err_size)
{
	struct cluster_frame_in *in = &j->joined_in[p->rank - 1];
	struct cluster_refuse refuse;
	char why[256] = "";
	int ret = cluster_frame_in_read(p->fd, in, &p->seq.recv, why, sizeof(why));

	if (ret == 0)
		return 0;
	if (ret == 1 && in->header.type == CLUSTER_MSG_REFUSE &&
	    cluster_refuse_decode(in->bytes + CLUSTER_FRAME_HEADER_BYTES,
				  in->header.payload_length, &refuse, why, sizeof(why)) == 0)
		return sel_fail(SEL_ESTOPPED, err, err_size, "rank %u failed at startup: %s",
				 p->rank, refuse.text);
	if (ret == 1)
		snprintf(why, sizeof(why), "sent %s before its WELCOME",
			 cluster_msg_name(in->header.type));
	return sel_fail(ret == 1 ? SEL_EPROTO : ret, err, err_size,
			 "rank %u's connection ended before the cluster formed: %s", p->rank, why);
}

/* Fills the poll set: the listener, every stranger, every joined peer. */
static nfds_t form_poll_set(struct form_join *j, uint64_t now, uint64_t *wake)
{
	nfds_t n = 0;

	/* A negative fd is skipped by poll: the listener rests after a failure. */
	j->fds[n++] = (struct pollfd){ .fd = now < j->accept_retry_ns ? -1 : j->o->listen_fd,
				       .events = POLLIN };
	if (now < j->accept_retry_ns && j->accept_retry_ns < *wake)
		*wake = j->accept_retry_ns;
	for (uint32_t i = 0; i < j->pending_count; i++) {
		j->fds[n++] = (struct pollfd){ .fd = j->pending[i].fd, .events = POLLIN };
		if (j->pending[i].deadline_ns < *wake)
			*wake = j->pending[i].deadline_ns;
	}
	for (uint32_t r = 0; r + 1 < j->o->policy.world_size; r++)
		if (j->peers[r].fd >= 0)
			j->fds[n++] = (struct pollfd){ .fd = j->peers[r].fd, .events = POLLIN };
	return n;
}

/* Names the first missing rank and the last refusal, for the timeout. */
static int form_timeout(struct form_join *j, char *err, size_t err_size)
{
	uint32_t peer_count = j->o->policy.world_size - 1, missing = 0;

	for (uint32_t r = 0; r < peer_count; r++)
		if (j->peers[r].fd < 0) {
			missing = r + 1;
			break;
		}
	return sel_fail(-ETIMEDOUT, err, err_size,
			 "%u of %u peers joined before the deadline (rank %u is missing)%s%s",
			 j->joined, peer_count, missing,
			 j->last_refusal[0] ? "; last refused connection " : "", j->last_refusal);
}

/* One round: wait, accept, move every connection that has bytes on. */
static int form_round(struct form_join *j, uint64_t deadline, char *err, size_t err_size)
{
	uint64_t now = sel_monotonic_ns(), wake = deadline;
	uint32_t pending_polled;
	nfds_t n, at;
	int ret;

	for (uint32_t i = j->pending_count; i-- > 0;)
		if (j->pending[i].deadline_ns <= now)
			form_drop(j, i, "no handshake before its deadline");
	if (now >= deadline)
		return form_timeout(j, err, err_size);
	n = form_poll_set(j, now, &wake);
	pending_polled = j->pending_count;
	ret = poll(j->fds, n, (int)ms_until(now, wake));
	if (ret < 0 && errno != EINTR)
		return sel_fail(-errno, err, err_size, "poll: %s", strerror(errno));
	if (ret <= 0)
		return 0;
	at = 1 + pending_polled;
	for (uint32_t r = 0; at < n && r + 1 < j->o->policy.world_size; r++) {
		if (j->peers[r].fd != j->fds[at].fd)
			continue;
		if (j->fds[at++].revents) {
			ret = form_joined_event(j, &j->peers[r], err, err_size);
			if (ret)
				return ret;
		}
	}
	/* backwards: a step may move the last entry into the one it ends */
	for (uint32_t i = pending_polled; i-- > 0;) {
		if (!j->fds[1 + i].revents)
			continue;
		ret = form_step(j, i, err, err_size);
		if (ret)
			return ret;
	}
	if (j->fds[0].revents)
		form_accept(j, sel_monotonic_ns());
	return 0;
}

/* The joined sockets go back to blocking I/O, under the formation's deadline. */
static void form_blocking(struct coord_peer *peers, uint32_t peer_count, uint64_t deadline)
{
	uint64_t left = ms_until(sel_monotonic_ns(), deadline) + 1;
	struct timeval tv = { .tv_sec = (time_t)(left / 1000),
			      .tv_usec = (suseconds_t)(left % 1000) * 1000 };

	for (uint32_t i = 0; i < peer_count; i++) {
		int flags = fcntl(peers[i].fd, F_GETFL);

		if (flags >= 0)
			fcntl(peers[i].fd, F_SETFL, flags & ~O_NONBLOCK);
		setsockopt(peers[i].fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(peers[i].fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
}

/*
 * The blocking part of the formation (summaries, agreement, confirmations)
 * under one deadline: SO_RCVTIMEO bounds each read, so a peer sending a
 * byte at a time could stretch it without end. At the deadline the
 * watchdog shuts down the peers' sockets for reading, and every read there
 * ends at once.
 */
struct form_watchdog {
	pthread_t thread;
	bool started;
	bool stop;  /* atomic: the formation is over */
	bool fired; /* atomic: the deadline passed first */
	uint64_t deadline;
	const struct coord_peer *peers;
	uint32_t peer_count;
};

static void *form_watchdog_main(void *arg)
{
	struct form_watchdog *w = arg;

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		if (sel_monotonic_ns() >= w->deadline) {
			__atomic_store_n(&w->fired, true, __ATOMIC_RELEASE);
			for (uint32_t i = 0; i < w->peer_count; i++)
				shutdown(w->peers[i].fd, SHUT_RD);
			break;
		}
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	}
	return NULL;
}

/* Starts the watchdog; without a thread the reads' own timeouts remain. */
static void form_watchdog_start(struct form_watchdog *w, const struct coord_peer *peers,
				uint32_t peer_count, uint64_t deadline)
{
	*w = (struct form_watchdog){ .deadline = deadline, .peers = peers,
				     .peer_count = peer_count };
	w->started = sel_thread_start(&w->thread, form_watchdog_main, w) == 0;
	if (!w->started)
		sel_warn("cluster: no watchdog thread for the formation's deadline");
}

/* Stops the watchdog; true when it had fired (the sockets are shut). */
static bool form_watchdog_stop(struct form_watchdog *w)
{
	if (!w->started)
		return false;
	__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
	pthread_join(w->thread, NULL);
	w->started = false;
	return __atomic_load_n(&w->fired, __ATOMIC_ACQUIRE);
}

/*
 * Joins world - 1 peers, driven by poll: a connection that fails the
 * handshake before proving the secret (a scan, garbage, a wrong MAC, an
 * idle or truncated one) is dropped with a rate-limited log line and the
 * accept loop goes on; one that proved the secret and breaks a rule (a
 * rank seen twice, another geometry) fails the formation, since that rank
 * can never join.
 */
static int form_join(const struct coord_form_options *o, struct coord_peer *peers,
		     struct cluster_joiner *joiners, uint64_t deadline, char *err,
		     size_t err_size)
{
	uint32_t peer_count = o->policy.world_size - 1;
	struct form_join *j = calloc(1, sizeof(*j));
	int ret = 0;

	if (j) {
		j->o = o;
		j->peers = peers;
		j->joiners = joiners;
		j->joined_in = calloc(peer_count, sizeof(*j->joined_in));
		j->fds = calloc(1 + CLUSTER_JOIN_PENDING_MAX + peer_count, sizeof(*j->fds));
	}
	if (!j || !j->joined_in || !j->fds)
		ret = sel_fail(-ENOMEM, err, err_size, "out of memory for the join");
	while (!ret && j->joined < peer_count)
		ret = form_round(j, deadline, err, err_size);
	for (uint32_t i = 0; j && i < j->pending_count; i++)
		close(j->pending[i].fd);
	if (j && (j->strangers_dropped || j->log_suppressed))
		sel_warn("join: %llu connections dropped that never proved the launch secret",
			 (unsigned long long)j->strangers_dropped);
	if (!ret)
		form_blocking(peers, peer_count, deadline);
	if (j) {
		free(j->joined_in);
		free(j->fds);
	}
	free(j);
	return ret;
}

/* Tells every joined peer why the formation failed, then closes it. */
static void form_refuse_joined(struct coord_peer *peers, uint32_t peer_count, const char *why)
{
	for (uint32_t i = 0; i < peer_count; i++) {
		if (peers[i].fd < 0)
			continue;
		cluster_join_refuse(peers[i].fd, &peers[i].seq, CLUSTER_REFUSE_SHUTDOWN, why);
		close(peers[i].fd);
		peers[i].fd = -1;
	}
}

/* Rank zero's failure, told to the peers that connect after it. */
struct notice {
	struct form_conn conns[CLUSTER_JOIN_PENDING_MAX];
	struct pollfd fds[1 + CLUSTER_JOIN_PENDING_MAX];
	uint32_t count;
	bool *told;        /* by rank */
	uint32_t untold;
	uint32_t world_size;
	uint64_t accept_retry_ns; /* as form_join's: the listener rests until then */
	char text[CLUSTER_REFUSE_TEXT_BYTES_MAX + 1];
};

/* Answers a connection's HELLO with the failure; ends the connection. */
static void notice_answer(struct notice *n, uint32_t index)
{
	struct form_conn *c = &n->conns[index];
	char ignored[256];
	int ret = cluster_frame_in_read(c->fd, &c->in, &c->joiner.seq.recv, ignored,
					sizeof(ignored));

	if (ret == 0)
		return;
	if (ret == 1 && c->in.header.type == CLUSTER_MSG_HELLO &&
	    cluster_hello_decode(c->in.bytes + CLUSTER_FRAME_HEADER_BYTES,
				 c->in.header.payload_length, &c->joiner.hello, ignored,
				 sizeof(ignored)) == 0) {
		uint32_t rank = c->joiner.hello.rank;

		cluster_join_refuse(c->fd, &c->joiner.seq, CLUSTER_REFUSE_SHUTDOWN, n->text);
		if (rank < n->world_size && !n->told[rank]) {
			n->told[rank] = true;
			n->untold--;
		}
	}
	close(c->fd);
	n->conns[index] = n->conns[--n->count];
}

/* One round: wait, answer what came, accept what waits. */
static void notice_round(struct notice *n, int listen_fd, uint64_t deadline)
{
	uint64_t now = sel_monotonic_ns(), wake = deadline;
	bool resting = now < n->accept_retry_ns;
	nfds_t polled = 1;

	/* After a failed accept the listener rests, or poll would spin on it. */
	n->fds[0] = (struct pollfd){ .fd = resting ? -1 : listen_fd, .events = POLLIN };
	if (resting && n->accept_retry_ns < wake)
		wake = n->accept_retry_ns;
	for (uint32_t i = 0; i < n->count; i++)
		n->fds[polled++] = (struct pollfd){ .fd = n->conns[i].fd, .events = POLLIN };
	if (poll(n->fds, polled, (int)ms_until(now, wake)) <= 0)
		return;
	for (uint32_t i = (uint32_t)polled - 1; i-- > 0;)
		if (n->fds[1 + i].revents)
			notice_answer(n, i);
	while (!resting) {
		struct sockaddr_storage addr;
		socklen_t len = sizeof(addr);
		int fd = accept_ready(listen_fd, &addr, &len);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				n->accept_retry_ns = sel_monotonic_ns() +
						     CLUSTER_JOIN_ACCEPT_RETRY_MS * 1000000ull;
			break;
		}
		/* A full table gives up its oldest: idle strangers cannot hold it. */
		if (n->count == CLUSTER_JOIN_PENDING_MAX) {
			uint32_t oldest = 0;

			for (uint32_t i = 1; i < n->count; i++)
				if (n->conns[i].deadline_ns < n->conns[oldest].deadline_ns)
					oldest = i;
			close(n->conns[oldest].fd);
			n->conns[oldest] = n->conns[--n->count];
		}
		memset(&n->conns[n->count], 0, sizeof(n->conns[n->count]));
		n->conns[n->count].deadline_ns = sel_monotonic_ns(); /* here: accepted at */
		n->conns[n->count++].fd = fd;
	}
}

void coord_cluster_notify_failure(int listen_fd, uint32_t world_size, const bool *told,
				  const char *why)
{
	uint64_t deadline = sel_monotonic_ns() + CLUSTER_FAILURE_NOTICE_MS * 1000000ull;
	struct notice *n = calloc(1, sizeof(*n));

	if (n)
		n->told = calloc(world_size, sizeof(*n->told));
	if (!n || !n->told || listen_fd < 0)
		goto out_free;
	n->world_size = world_size;
	snprintf(n->text, sizeof(n->text), "rank zero stopped: %s", why);
	for (uint32_t r = 1; r < world_size; r++) {
		n->told[r] = told && told[r];
		n->untold += !n->told[r];
	}
	while (n->untold > 0 && sel_monotonic_ns() < deadline)
		notice_round(n, listen_fd, deadline);
	for (uint32_t i = 0; i < n->count; i++)
		close(n->conns[i].fd);
out_free:
	if (n)
		free(n->told);
	free(n);
}

/* The agreed limit: the smallest among ranks (docs/DESIGN.md section 7). */
static uint64_t smallest_limit(const struct coord_form_options *o,
			       const struct cluster_joiner *joiners, uint32_t peers)
{
	uint64_t limit = o->disk_limit_bytes;

	for (uint32_t i = 0; i < peers; i++)
		if (joiners[i].hello.disk_limit_bytes < limit)
			limit = joiners[i].hello.disk_limit_bytes;
	return limit;
}

/* Sends each peer its share of the agreement; applies rank zero's own. */
static int form_distribute(const struct coord_form_options *o, struct coord_peer *peers,
			   const struct coord_rank_records *ranks,
			   const struct coord_agreement *a, char *err, size_t err_size)
{
	for (uint32_t r = 0; r < o->policy.world_size; r++) {
		const enum coord_action *actions = coord_agreement_actions(a, r);
		struct cluster_agreement_entry *entries =
			malloc((ranks[r].count ? ranks[r].count : 1) * sizeof(*entries));
		int ret = entries ? 0 : -ENOMEM;

		for (size_t i = 0; !ret && i < ranks[r].count; i++) {
			const struct rec_key *key = &ranks[r].records[i].key;

			entries[i] = (struct cluster_agreement_entry){
				.key = *key,
				.action = actions[i] == COORD_ACTION_DELETE ? CLUSTER_ACTION_DELETE :
					  actions[i] == COORD_ACTION_TRUNCATE_ROW ?
						  CLUSTER_ACTION_TRUNCATE_ROW : CLUSTER_ACTION_KEEP,
			};
			if (r == 0 && entries[i].action == CLUSTER_ACTION_DELETE)
				ret = rec_unlink(o->dir, key);
			else if (r == 0 && entries[i].action == CLUSTER_ACTION_TRUNCATE_ROW)
				ret = rec_truncate_row(o->dir, key);
			ret = ret == -ENOENT ? 0 : ret;
		}
		if (!ret && r > 0)
			ret = cluster_agreement_send(peers[r - 1].fd, &peers[r - 1].seq, entries,
						     ranks[r].count);
		free(entries);
		if (ret)
			return sel_fail(ret, err, err_size, "applying the agreement on rank %u: %s",
					 r, sel_strerror(ret));
	}
	return 0;
}

/*
 * Moves the agreed records into a scan's shape: after every rank applied
 * the agreement, rank zero's directory holds exactly these, so they stand
 * for a rescan. Their lengths come from the geometry (R-REC-8, R-REC-10;
 * the scan checked every header against it, R-REC-12): the summaries carry
 * no peer's length, and a truncated file is page-only now.
 */
/* rec_key_compare for qsort and bsearch */
static int key_order(const void *a, const void *b)
{
	return rec_key_compare(a, b);
}

/*
 * The keys some rank keeps in place that the agreement does not index
 * (R-AGREE-2): every rank's held keys, and every record a rank keeps
 * (KEEP) that is not agreed (held on every rank by rule 7: a parent or child
 * some rank could not read). Sorted, each once, into *keys (caller frees;
 * NULL with none). Returns 0 or -ENOMEM.
 */
static int form_held_keys(const struct coord_rank_records *ranks, uint32_t world,
			  const struct coord_agreement *a, struct rec_key **keys, size_t *count)
{
	struct rec_key *agreed = NULL, *out = NULL;
	size_t n = 0, max = 0;

	*keys = NULL;
	*count = 0;
	for (uint32_t r = 0; r < world; r++)
		max += ranks[r].held_count + ranks[r].count;
	if (max == 0)
		return 0;
	out = malloc(max * sizeof(*out));
	agreed = malloc((a->record_count ? a->record_count : 1) * sizeof(*agreed));
	if (!out || !agreed) {
		free(out);
		free(agreed);
		return -ENOMEM;
	}
	for (size_t i = 0; i < a->record_count; i++)
		agreed[i] = a->records[i].key;
	qsort(agreed, a->record_count, sizeof(*agreed), key_order);
	for (uint32_t r = 0; r < world; r++) {
		const enum coord_action *actions = coord_agreement_actions(a, r);

		for (size_t i = 0; i < ranks[r].held_count; i++)
			out[n++] = ranks[r].held[i];
		for (size_t i = 0; i < ranks[r].count; i++)
			if (actions[i] == COORD_ACTION_KEEP &&
			    !bsearch(&ranks[r].records[i].key, agreed, a->record_count,
				     sizeof(*agreed), key_order))
				out[n++] = ranks[r].records[i].key;
	}
	free(agreed);
	qsort(out, n, sizeof(*out), key_order);
	*count = 0;
	for (size_t i = 0; i < n; i++)
		if (*count == 0 || key_order(&out[*count - 1], &out[i]) != 0)
			out[(*count)++] = out[i];
	if (*count == 0) {
		free(out);
		out = NULL;
	}
	*keys = out;
	return 0;
}

static void form_take_agreed(const struct rec_geometry *g, struct coord_agreement *a,
			     struct rec_key *held, size_t held_count, struct rec_scan *out)
{
	memset(out, 0, sizeof(*out));
	out->records = a->records;
	out->record_count = a->record_count;
	out->held = held;
	out->held_count = held_count;
	for (size_t i = 0; i < a->record_count; i++) {
		struct rec_record_info *r = &a->records[i];

		r->file_bytes = REC_HEADER_BYTES +
				sel_align_up(8ull * r->tail_page_count, SEL_BLOCK_BYTES) +
				g->page_record_bytes * r->tail_page_count +
				(r->row_present ? g->row_record_bytes : 0);
		out->bytes += r->file_bytes;
	}
	a->records = NULL;
	a->record_count = 0;
}

/* Every peer confirms it applied its share. */
static int form_confirm(struct coord_peer *peers, uint32_t peer_count, char *err,
			size_t err_size)
{
	uint8_t buf[64];
	char why[256] = "";

	for (uint32_t i = 0; i < peer_count; i++) {
		struct cluster_frame_header h;
		struct cluster_agreed agreed = { 0 };
		int ret = cluster_frame_read(peers[i].fd, buf, sizeof(buf), &peers[i].seq.recv, &h,
					     why, sizeof(why));

		if (ret == 0) { /* end of file between frames: no AGREED will come */
			snprintf(why, sizeof(why), "it closed its link");
			ret = -ECONNRESET;
		} else if (ret == 1 && h.type != CLUSTER_MSG_AGREED) {
			/* why still held the last frame's text, or nothing */
			snprintf(why, sizeof(why), "it sent %s, expected %s",
				 cluster_msg_name(h.type), cluster_msg_name(CLUSTER_MSG_AGREED));
			ret = SEL_EPROTO;
		} else if (ret == 1) {
			ret = cluster_agreed_decode(buf, h.payload_length, &agreed, why, sizeof(why));
		}
		if (ret == 0 && agreed.result)
			return sel_fail(agreed.result, err, err_size,
					 "rank %u could not apply the agreement: %s", peers[i].rank,
					 sel_strerror(agreed.result));
		if (ret)
			return sel_fail(ret, err, err_size,
					 "rank %u did not confirm the agreement: %s", peers[i].rank,
					 why);
	}
	return 0;
}

/* "rank 0: 12 records, rank 1: none (unmarked), ..." into out, truncated with "...". */
static void rank_counts(const struct coord_form_options *o, const struct cluster_joiner *joiners,
			const struct coord_rank_records *ranks, char *out, size_t size)
{
	size_t used = 0;

	out[0] = '\0';
	for (uint32_t r = 0; r < o->policy.world_size && used + 40 < size; r++) {
		bool marked = r == 0 ? o->marked : joiners[r - 1].hello.marked;
		int n = snprintf(out + used, size - used, "%srank %u: %zu records%s",
				 r ? ", " : "", r, ranks[r].count, marked ? "" : " (unmarked)");

		used += n > 0 ? (size_t)n : 0;
	}
	if (used + 40 >= size)
		snprintf(out + (size > 4 ? size - 4 : 0), size > 4 ? 4 : 0, "...");
}

/* What the agreement would take from each rank: files deleted, rows truncated. */
struct form_losses {
	uint64_t deleted, truncated;
	uint32_t first_rank;         /* the first rank that loses something */
	struct rec_key first_key;    /* and its first record lost */
};

static void form_count_losses(const struct coord_form_options *o,
			      const struct coord_rank_records *ranks,
			      const struct coord_agreement *a, struct form_losses *out,
			      char *text, size_t size)
{
	size_t used = 0;

	memset(out, 0, sizeof(*out));
	out->first_rank = o->policy.world_size;
	text[0] = '\0';
	for (uint32_t r = 0; r < o->policy.world_size; r++) {
		const enum coord_action *actions = coord_agreement_actions(a, r);
		uint64_t deleted = 0, truncated = 0;
		int n;

		for (size_t i = 0; i < ranks[r].count; i++) {
			if (actions[i] == COORD_ACTION_KEEP)
				continue;
			deleted += actions[i] == COORD_ACTION_DELETE;
			truncated += actions[i] == COORD_ACTION_TRUNCATE_ROW;
			if (out->first_rank == o->policy.world_size) {
				out->first_rank = r;
				out->first_key = ranks[r].records[i].key;
			}
		}
		out->deleted += deleted;
		out->truncated += truncated;
		if (deleted + truncated == 0 || used + 60 >= size)
			continue;
		n = snprintf(text + used, size - used, "%srank %u: %llu deleted, %llu rows "
			     "truncated", used ? "; " : "", r, (unsigned long long)deleted,
			     (unsigned long long)truncated);
		used += n > 0 ? (size_t)n : 0;
	}
}

/*
 * The agreement keeps only what every rank holds: a rank whose directory is
 * unmarked and empty, or unmarked while another is marked, may be a missing
 * mount or a wrong path (a directory whose records all failed to read
 * reports itself unmarked: rec_dir_scan_marked), and would make it delete
 * every rank's records. Once the agreement a is decided, that is refused
 * when it deletes a file or truncates a row on any rank, naming the rank,
 * the counts and the losses, unless the operator accepted it (then the
 * losses are logged at warning level). An unmarked directory that holds
 * what the others hold (a copy that left the dot-file marker behind)
 * loses nothing: it forms, and every rank writes its marker.
 */
static int form_check_empty_ranks(const struct coord_form_options *o,
				  const struct cluster_joiner *joiners,
				  const struct coord_rank_records *ranks,
				  const struct coord_agreement *a, char *err, size_t err_size)
{
	uint32_t world = o->policy.world_size, holder = world, suspect = world;
	bool any_marked = o->marked;
	struct form_losses losses;
	char counts[400], lost[300], name[REC_FILE_NAME_BYTES];

	for (uint32_t r = 1; r < world; r++)
		any_marked = any_marked || joiners[r - 1].hello.marked;
	for (uint32_t r = 0; r < world; r++) {
		bool marked = r == 0 ? o->marked : joiners[r - 1].hello.marked;

		if (ranks[r].count > 0 && (holder == world || ranks[r].count > ranks[holder].count))
			holder = r;
		/*
		 * A marked directory was set up here by an earlier formation:
		 * empty, its rank was stopped before its first record landed
		 * (refusing it would refuse every restart). Unmarked and empty,
		 * or unmarked beside a marked one, it may be a missing mount.
		 */
		if (suspect == world && !marked && (ranks[r].count == 0 || any_marked))
			suspect = r;
	}
	if (holder == world || suspect == world)
		return 0;
	form_count_losses(o, ranks, a, &losses, lost, sizeof(lost));
	rank_counts(o, joiners, ranks, counts, sizeof(counts));
	if (losses.deleted + losses.truncated == 0) {
		sel_warn("cluster: rank %u's record directory is unmarked; it holds what the "
			 "others hold, so the cluster forms and marks it (%s)", suspect, counts);
		return 0;
	}
	rec_file_name(name, &losses.first_key);
	if (!o->accept_empty_ranks)
		return sel_fail(SEL_EMISMATCH, err, err_size,
				 "rank %u's record directory is %s (%zu records) while rank %u "
				 "holds %zu: a missing mount or a wrong path? Forming would delete "
				 "%llu records and truncate %llu rows (%s; first %s on rank %u); to "
				 "accept that, start with accept_empty_ranks "
				 "(SELENE_ACCEPT_EMPTY_RANKS=1) (%s)", suspect,
				 ranks[suspect].count ? "unmarked" : "empty", ranks[suspect].count,
				 holder, ranks[holder].count, (unsigned long long)losses.deleted,
				 (unsigned long long)losses.truncated, lost, name,
				 losses.first_rank, counts);
	sel_warn("cluster: rank %u's record directory is %s and that was accepted: the "
		 "agreement deletes %llu records and truncates %llu rows (%s) (%s)", suspect,
		 ranks[suspect].count ? "unmarked" : "empty", (unsigned long long)losses.deleted,
		 (unsigned long long)losses.truncated, lost, counts);
	return 0;
}

/* The time since *step, which moves to now. */
static uint64_t form_lap(uint64_t *step)
{
	uint64_t now = sel_monotonic_ns(), lap = now - *step;

	*step = now;
	return lap;
}

int coord_cluster_form(const struct coord_form_options *o, struct coord_peer *peers,
		       uint64_t *agreed_disk_limit, char *err, size_t err_size)
{
	uint32_t world = o->policy.world_size, peer_count = world - 1;
	uint64_t deadline = sel_monotonic_ns() + (uint64_t)o->timeout_ms * 1000000ull;
	struct cluster_joiner *joiners = calloc(world, sizeof(*joiners));
	struct coord_rank_records *ranks = calloc(world, sizeof(*ranks));
	struct cluster_summary *summaries = calloc(world, sizeof(*summaries));
	struct coord_agreement agreement = { 0 };
	struct form_watchdog watchdog = { 0 };
	bool decided = false;
	char why[256];
	int ret = joiners && ranks && summaries ? 0 : -ENOMEM;
	struct coord_form_times times = { 0 };
	uint64_t step = sel_monotonic_ns();

	for (uint32_t i = 0; i < peer_count; i++)
		peers[i].fd = -1;
	if (!ret)
		ret = form_join(o, peers, joiners, deadline, err, err_size);
	if (!ret)
		form_watchdog_start(&watchdog, peers, peer_count, deadline);
	if (!ret) {
		*agreed_disk_limit = smallest_limit(o, joiners, peer_count);
		for (uint32_t i = 0; !ret && i < peer_count; i++) {
			ret = cluster_join_welcome(peers[i].fd, o->secret, &joiners[i],
						   *agreed_disk_limit);
			peers[i].seq = joiners[i].seq; /* the welcome took a number */
		}
		if (ret)
			sel_fail(ret, err, err_size, "welcoming a peer: %s", sel_strerror(ret));
	}
	times.join_ns = form_lap(&step);
	ranks[0] = (struct coord_rank_records){ o->records, o->record_count, o->held,
						o->held_count };
	for (uint32_t i = 0; !ret && i < peer_count; i++) {
		struct cluster_summary *got = &summaries[i + 1];

		ret = cluster_summary_recv(peers[i].fd, &peers[i].seq, got, why, sizeof(why));
		ranks[i + 1] = (struct coord_rank_records){ got->records, got->record_count,
							    got->held, got->held_count };
		if (ret == SEL_ESTOPPED)
			sel_fail(ret, err, err_size, "rank %u failed at startup: %s", peers[i].rank,
				  why);
		else if (ret)
			sel_fail(ret, err, err_size, "rank %u's summary: %s", peers[i].rank, why);
	}
	times.summary_ns = form_lap(&step);
	if (!ret) {
		ret = coord_agreement_decide(&agreement, ranks, world,
					     o->records_max ? o->records_max : SIZE_MAX);
		decided = ret == 0;
		if (ret)
			sel_fail(ret, err, err_size, "deciding the agreement: %s", sel_strerror(ret));
	}
	if (!ret)
		ret = form_check_empty_ranks(o, joiners, ranks, &agreement, err, err_size);
	times.agreement_ns = form_lap(&step);
	if (!ret)
		ret = form_distribute(o, peers, ranks, &agreement, err, err_size);
	if (!ret)
		ret = form_confirm(peers, peer_count, err, err_size);
	if (form_watchdog_stop(&watchdog))
		ret = sel_fail(-ETIMEDOUT, err, err_size, "the cluster did not form within %u ms "
			       "(join_timeout_ms): a rank's startup messages came too slowly",
			       o->timeout_ms);
	times.apply_ns = form_lap(&step);
	if (o->times)
		*o->times = times;
	if (!ret && o->dir) {
		int marked = rec_dir_mark(o->dir, world);

		if (marked)
			sel_warn("cluster: cannot write the cluster marker in %s: %s; the next "
				 "start will take this directory for a new one",
				 rec_dir_path(o->dir), strerror(-marked));
	}
	if (!ret)
		sel_info("cluster formed: %u ranks, %zu records agreed (%llu disagreed, %llu "
			 "held unread and left in place, %llu "
			 "orphaned, %llu rows dropped, %llu past records_max), disk limit %llu",
			 world, agreement.record_count, (unsigned long long)agreement.disagreed,
			 (unsigned long long)agreement.held,
			 (unsigned long long)agreement.orphans_dropped,
			 (unsigned long long)agreement.rows_dropped,
			 (unsigned long long)agreement.capacity_dropped,
			 (unsigned long long)*agreed_disk_limit);
	if (!ret && o->agreed) {
		struct rec_key *held;
		size_t held_count;

		ret = form_held_keys(ranks, world, &agreement, &held, &held_count);
		if (ret)
			sel_fail(ret, err, err_size, "out of memory listing the held records");
		else
			form_take_agreed(rec_dir_geometry(o->dir), &agreement, held, held_count,
					 o->agreed);
	}
	if (decided)
		coord_agreement_destroy(&agreement);
	for (uint32_t i = 0; summaries && i < world; i++)
		cluster_summary_free(&summaries[i]);
	free(summaries);
	free(ranks);
	free(joiners);
	if (ret) {
		/* Every rank learns it now, not at its join timeout. */
		bool *told = calloc(world, sizeof(*told));

		for (uint32_t i = 0; told && i < peer_count; i++)
			told[i + 1] = peers[i].fd >= 0;
		form_refuse_joined(peers, peer_count, err);
		coord_cluster_notify_failure(o->listen_fd, world, told, err);
		free(told);
	}
	return ret;
}
