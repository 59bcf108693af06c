/*
 * A peer joining the cluster at startup (docs/DESIGN.md section 7): the join
 * handshake, its directory's summary, then rank zero's agreement applied
 * to its directory (delete, or truncate the row) and confirmed. Synchronous.
 */
#ifndef SELENE_PEER_JOIN_H
#define SELENE_PEER_JOIN_H

#include "cluster/join.h"
#include "record/dir.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Runs the peer's side of the startup on a connected fd, summarising scan
 * (dir's; NULL without a disk store): its records and the keys it holds
 * unread (R-WIRE-18). Returns 0 with the agreed disk limit and the frame
 * numbers the link continues from, or a negative code with the reason in
 * why.
 */
int peer_join_cluster(int fd, const uint8_t *secret, const struct cluster_identity *me,
		      struct rec_dir *dir, const struct rec_scan *scan,
		      struct cluster_sequences *seq,
		      uint64_t *agreed_disk_limit, char *why, size_t why_size);

#endif
