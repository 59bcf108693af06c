/*
 * Rank zero forming the cluster at startup (docs/DESIGN.md section 7): accepts
 * and joins every peer, agrees on the disk limit (the smallest), collects
 * each rank's summary, decides the agreement (coordinator/agreement.h),
 * applies rank zero's share to its own directory, sends every peer its
 * share and waits until every peer confirms. Only then may rank zero build
 * its index. Synchronous; every socket is left connected for its link.
 */
#ifndef SELENE_COORDINATOR_CLUSTER_H
#define SELENE_COORDINATOR_CLUSTER_H

#include "cluster/join.h"
#include "record/dir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A joined peer: its socket and the frame numbers its link continues. */
struct coord_peer {
	int fd;
	uint32_t rank;
	struct cluster_sequences seq;
};

/* How long each step of the formation took, for selene bench startup. */
struct coord_form_times {
	uint64_t join_ns;      /* accepting, authenticating and welcoming peers */
	uint64_t summary_ns;   /* receiving every peer's summary */
	uint64_t agreement_ns; /* coord_agreement_decide */
	uint64_t apply_ns;     /* applying rank zero's share, sending the rest, confirms */
};

struct coord_form_options {
	int listen_fd;                       /* bound and listening */
	const uint8_t *secret;               /* CLUSTER_SECRET_BYTES */
	struct cluster_join_policy policy;   /* world, layout, disk store, addresses */
	uint64_t disk_limit_bytes;           /* rank zero's own */
	struct rec_dir *dir;                 /* rank zero's directory, scanned */
	const struct rec_record_info *records; /* rank zero's scan */
	size_t record_count;
	const struct rec_key *held;          /* its keys held unread (R-DIR-7) */
	size_t held_count;
	size_t records_max;                  /* rank zero's index holds no more: the
						agreement keeps at most these
						(rule 6); 0: no limit */
	uint32_t timeout_ms;                 /* for the whole formation */
	bool marked;                         /* rank zero's directory has the marker
						(rec_dir_scan_marked) */
	bool accept_empty_ranks;             /* form even when a rank's directory is
						unmarked and empty, or unmarked
						while another is marked, while others
						hold records that the agreement
						deletes or truncates */
	struct coord_form_times *times;      /* optional: filled as steps end */
	/*
	 * Optional: on success, the agreed records as rank zero's directory
	 * now holds them (coord_agreement.records: oldest first, row present
	 * only where every rank kept it), for the index, so rank zero need not
	 * scan its directory again; the caller frees it with rec_scan_free.
	 */
	struct rec_scan *agreed;
};

/*
 * Forms the cluster. On success fills peers[0 .. world - 2] (by rank) and
 * *agreed_disk_limit, writes rank zero's cluster marker (each peer writes its
 * own), fills options->agreed if given, and returns 0; rank zero then builds
 * its index from the agreed records. The join is driven by poll
 * (docs/DESIGN.md section 7): a connection that never proves the launch
 * secret costs a rate-limited log line, never the formation; at most
 * CLUSTER_JOIN_PENDING_MAX handshakes are pending, each with a
 * CLUSTER_JOIN_HANDSHAKE_MS deadline. On failure (a rank refused after it
 * proved the secret, a peer that reports its own startup failure or leaves,
 * the timeout, naming the missing rank, a rank whose directory is unmarked
 * and empty, or unmarked while another is marked, while another holds
 * records and the agreement would delete a file or truncate a row on any
 * rank, unless accept_empty_ranks) returns a
 * negative code with the reason in err, tells every joined peer why (REFUSE),
 * closes their sockets and runs coord_cluster_notify_failure.
 */
int coord_cluster_form(const struct coord_form_options *options,
		       struct coord_peer *peers, uint64_t *agreed_disk_limit,
		       char *err, size_t err_size);

/*
 * Rank zero failed at startup (before or during formation): for up to
 * CLUSTER_FAILURE_NOTICE_MS, accepts connections on listen_fd and answers
 * each HELLO with REFUSE (shutdown) carrying why, so every peer stops at
 * once instead of at its join timeout. Returns early once every rank from
 * 1 to world_size - 1 was told (told, world_size entries or NULL: ranks
 * told already). Closes what it accepted; listen_fd stays the caller's.
 */
void coord_cluster_notify_failure(int listen_fd, uint32_t world_size, const bool *told,
				  const char *why);

#endif
