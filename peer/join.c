/* A peer's startup: see join.h. */
#include "peer/join.h"

#include "cluster/summary.h"
#include "common/base.h"
#include "common/log.h"
#include "record/file.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>

struct apply_state {
	struct rec_dir *dir;
	uint64_t deleted, truncated;
};

/* Applies one agreement entry to this rank's directory. */
static int apply_entry(void *ctx, const struct cluster_agreement_entry *e)
{
	struct apply_state *s = ctx;
	int ret = 0;

	if (e->action == CLUSTER_ACTION_DELETE) {
		ret = rec_unlink(s->dir, &e->key);
		s->deleted += ret == 0;
	} else if (e->action == CLUSTER_ACTION_TRUNCATE_ROW) {
		ret = rec_truncate_row(s->dir, &e->key);
		s->truncated += ret == 0;
	}
	return ret == -ENOENT ? 0 : ret; /* already gone is agreed too */
}

int peer_join_cluster(int fd, const uint8_t *secret, const struct cluster_identity *me,
		      struct rec_dir *dir, const struct rec_scan *scan,
		      struct cluster_sequences *seq,
		      uint64_t *agreed_disk_limit, char *why, size_t why_size)
{
	struct apply_state state = { .dir = dir };
	struct cluster_agreed agreed = { 0 };
	size_t record_count = scan ? scan->record_count : 0;
	uint8_t buf[64];
	int ret, length;

	ret = cluster_join_peer(fd, secret, me, seq, agreed_disk_limit, why, why_size);
	if (ret)
		return ret;
	ret = cluster_summary_send(fd, seq, scan ? scan->records : NULL, record_count,
				   scan ? scan->held : NULL, scan ? scan->held_count : 0);
	if (ret) {
		snprintf(why, why_size, "sending the summary: %s", sel_strerror(ret));
		return ret;
	}
	ret = cluster_agreement_recv(fd, seq, apply_entry, &state, why, why_size);
	/* Confirm, or say why not: rank zero must not build an index on it. */
	agreed.result = ret < 0 && ret > -4096 ? ret : (ret ? SEL_EPROTO : 0);
	agreed.records_kept = ret ? 0 : record_count - state.deleted;
	length = cluster_agreed_encode(&agreed, buf, sizeof(buf));
	if (length > 0) {
		int sent = cluster_frame_write(fd, &seq->send, CLUSTER_MSG_AGREED, buf,
					       (uint32_t)length);

		if (!ret)
			ret = sent;
	}
	if (!ret && dir) {
		int marked = rec_dir_mark(dir, me->world_size);

		if (marked)
			sel_warn("rank %u: cannot write the cluster marker in %s: %s; the next "
				 "start will take this directory for a new one", me->rank,
				 rec_dir_path(dir), sel_strerror(marked));
	}
	if (!ret)
		sel_info("rank %u joined: agreement applied (%llu deleted, %llu truncated)",
			 me->rank, (unsigned long long)state.deleted,
			 (unsigned long long)state.truncated);
	return ret;
}
