/* Rank zero forming the cluster: see cluster.h. */
#include "coordinator/cluster.h"

#include "cluster/summary.h"
#include "common/base.h"
#include "common/log.h"
#include "coordinator/agreement.h"
#include "record/file.h"
#include "selene/selene.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int form_fail(int err, char *msg, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int form_fail(int err, char *msg, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, size, fmt, ap);
	va_end(ap);
	return err;
}

static uint64_t ms_left(uint64_t deadline)
{
	uint64_t now = sel_monotonic_ns();

	return now >= deadline ? 0 : (deadline - now) / 1000000;
}

/* The time since *step, which moves to now. */
static uint64_t form_lap(uint64_t *step)
{
	uint64_t now = sel_monotonic_ns(), lap = now - *step;

	*step = now;
	return lap;
}

/* Accepts one connection before the deadline, with socket timeouts set. */
static int accept_one(int listen_fd, uint64_t deadline)
{
	struct pollfd p = { .fd = listen_fd, .events = POLLIN };
	uint64_t left = ms_left(deadline);
	struct timeval tv = { .tv_sec = (time_t)(left / 1000),
			      .tv_usec = (suseconds_t)(left % 1000) * 1000 };
	int ret, fd;

	ret = poll(&p, 1, (int)left);
	if (ret <= 0)
		return ret == 0 ? -ETIMEDOUT : -errno;
	fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Joins world - 1 peers; a rank seen twice is refused. */
static int form_join(const struct coord_form_options *o, struct coord_peer *peers,
		     struct cluster_joiner *joiners, uint64_t deadline, char *err,
		     size_t err_size)
{
	uint32_t peer_count = o->policy.world_size - 1, joined = 0;
	char why[256];

	while (joined < peer_count) {
		struct cluster_joiner j;
		int fd = accept_one(o->listen_fd, deadline), ret;

		if (fd < 0)
			return form_fail(fd, err, err_size, "%u of %u peers joined before the "
					 "deadline", joined, peer_count);
		ret = cluster_join_accept(fd, o->secret, &o->policy, &j, why, sizeof(why));
		if (ret == 0 && peers[j.hello.rank - 1].fd >= 0) {
			cluster_join_refuse(fd, &j.seq, CLUSTER_REFUSE_RANK, "that rank already joined");
			snprintf(why, sizeof(why), "rank %u joined twice", j.hello.rank);
			ret = SEL_EMISMATCH;
		}
		if (ret) {
			/* A refused peer fails startup: every rank must take part. */
			close(fd);
			return form_fail(ret, err, err_size, "join refused: %s", why);
		}
		peers[j.hello.rank - 1] = (struct coord_peer){ .fd = fd, .rank = j.hello.rank,
							       .seq = j.seq };
		joiners[j.hello.rank - 1] = j;
		joined++;
	}
	return 0;
}

/* The agreed limit: the smallest among ranks (DESIGN.md section 7). */
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
			return form_fail(ret, err, err_size, "applying the agreement on rank %u: %s",
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
static void form_take_agreed(const struct rec_geometry *g, struct coord_agreement *a,
			     struct rec_scan *out)
{
	memset(out, 0, sizeof(*out));
	out->records = a->records;
	out->record_count = a->record_count;
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
	char why[256];

	for (uint32_t i = 0; i < peer_count; i++) {
		struct cluster_frame_header h;
		struct cluster_agreed agreed;
		int ret = cluster_frame_read(peers[i].fd, buf, sizeof(buf), &peers[i].seq.recv, &h,
					     why, sizeof(why));

		if (ret == 1 && h.type != CLUSTER_MSG_AGREED)
			ret = SEL_EPROTO;
		if (ret == 1)
			ret = cluster_agreed_decode(buf, h.payload_length, &agreed, why, sizeof(why));
		if (ret == 0 && agreed.result)
			return form_fail(agreed.result, err, err_size,
					 "rank %u could not apply the agreement: %s", peers[i].rank,
					 sel_strerror(agreed.result));
		if (ret)
			return form_fail(ret < 0 ? ret : -ECONNRESET, err, err_size,
					 "rank %u did not confirm the agreement: %s", peers[i].rank,
					 why);
	}
	return 0;
}

int coord_cluster_form(const struct coord_form_options *o, struct coord_peer *peers,
		       uint64_t *agreed_disk_limit, char *err, size_t err_size)
{
	uint32_t world = o->policy.world_size, peer_count = world - 1;
	uint64_t deadline = sel_monotonic_ns() + (uint64_t)o->timeout_ms * 1000000ull;
	struct cluster_joiner *joiners = calloc(world, sizeof(*joiners));
	struct coord_rank_records *ranks = calloc(world, sizeof(*ranks));
	struct rec_record_info **summaries = calloc(world, sizeof(*summaries));
	struct coord_agreement agreement = { 0 };
	bool decided = false;
	char why[256];
	int ret = joiners && ranks && summaries ? 0 : -ENOMEM;

	struct coord_form_times times = { 0 };
	uint64_t step = sel_monotonic_ns();

	for (uint32_t i = 0; i < peer_count; i++)
		peers[i].fd = -1;
	if (!ret)
		ret = form_join(o, peers, joiners, deadline, err, err_size);
	if (!ret) {
		*agreed_disk_limit = smallest_limit(o, joiners, peer_count);
		for (uint32_t i = 0; !ret && i < peer_count; i++) {
			ret = cluster_join_welcome(peers[i].fd, o->secret, &joiners[i],
						   *agreed_disk_limit);
			peers[i].seq = joiners[i].seq; /* the welcome took a number */
		}
		if (ret)
			form_fail(ret, err, err_size, "welcoming a peer: %s", sel_strerror(ret));
	}
	times.join_ns = form_lap(&step);
	ranks[0] = (struct coord_rank_records){ o->records, o->record_count };
	for (uint32_t i = 0; !ret && i < peer_count; i++) {
		ret = cluster_summary_recv(peers[i].fd, &peers[i].seq, &summaries[i + 1],
					   &ranks[i + 1].count, why, sizeof(why));
		ranks[i + 1].records = summaries[i + 1];
		if (ret)
			form_fail(ret, err, err_size, "rank %u's summary: %s", peers[i].rank, why);
	}
	times.summary_ns = form_lap(&step);
	if (!ret) {
		ret = coord_agreement_decide(&agreement, ranks, world);
		decided = ret == 0;
		if (ret)
			form_fail(ret, err, err_size, "deciding the agreement: %s", sel_strerror(ret));
	}
	times.agreement_ns = form_lap(&step);
	if (!ret)
		ret = form_distribute(o, peers, ranks, &agreement, err, err_size);
	if (!ret)
		ret = form_confirm(peers, peer_count, err, err_size);
	times.apply_ns = form_lap(&step);
	if (o->times)
		*o->times = times;
	if (!ret)
		sel_info("cluster formed: %u ranks, %zu records agreed (%llu disagreed, %llu "
			 "orphaned, %llu rows dropped), disk limit %llu", world,
			 agreement.record_count, (unsigned long long)agreement.disagreed,
			 (unsigned long long)agreement.orphans_dropped,
			 (unsigned long long)agreement.rows_dropped,
			 (unsigned long long)*agreed_disk_limit);
	if (!ret && o->agreed)
		form_take_agreed(rec_dir_geometry(o->dir), &agreement, o->agreed);
	if (decided)
		coord_agreement_destroy(&agreement);
	for (uint32_t i = 0; summaries && i < world; i++)
		free(summaries[i]);
	free(summaries);
	free(ranks);
	free(joiners);
	if (ret)
		for (uint32_t i = 0; i < peer_count; i++)
			if (peers[i].fd >= 0) {
				close(peers[i].fd);
				peers[i].fd = -1;
			}
	return ret;
}
