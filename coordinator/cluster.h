/*
 * Rank zero forming the cluster at startup (DESIGN.md section 7): accepts
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
	uint32_t timeout_ms;                 /* for the whole formation */
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
 * *agreed_disk_limit (and options->agreed), and returns 0; rank zero then
 * builds its index from the agreed records. On failure returns a negative code with the reason in err
 * (a refused peer is told why), and closes every peer socket.
 */
int coord_cluster_form(const struct coord_form_options *options,
		       struct coord_peer *peers, uint64_t *agreed_disk_limit,
		       char *err, size_t err_size);

#endif
