/*
 * Sending and receiving a directory summary and an agreement over a
 * connected socket during startup (docs/DESIGN.md section 7), in chunks that
 * each fit one frame (PROTOCOL.md R-WIRE-17/18). Shared by rank zero
 * (coordinator/) and the peers (peer/). Synchronous, under the socket's
 * timeouts; allocates one frame buffer per call.
 */
#ifndef SELENE_CLUSTER_SUMMARY_H
#define SELENE_CLUSTER_SUMMARY_H

#include "cluster/join.h"
#include "record/dir.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Sends records (a scan's) and then the keys it holds unsummarised (held,
 * R-DIR-7) as SUMMARY chunks (R-WIRE-18). 0 or a negative code.
 */
int cluster_summary_send(int fd, struct cluster_sequences *seq,
			 const struct rec_record_info *records, size_t count,
			 const struct rec_key *held, size_t held_count);

/* A summary received: what a peer's scan kept, and the keys it holds. */
struct cluster_summary {
	struct rec_record_info *records; /* length, mtime and creation time 0 */
	size_t record_count;
	struct rec_key *held;
	size_t held_count;
};

/*
 * Receives SUMMARY chunks into out (free with cluster_summary_free).
 * Returns 0, SEL_EPROTO with why, SEL_ESTOPPED when the other side sent
 * REFUSE instead (its startup failed: its text in
 * why, R-WIRE-24; also for AGREEMENT below), or a negative errno; on
 * failure out is untouched.
 */
int cluster_summary_recv(int fd, struct cluster_sequences *seq, struct cluster_summary *out,
			 char *why, size_t why_size);

/* Frees what cluster_summary_recv allocated; a zeroed one is fine. */
void cluster_summary_free(struct cluster_summary *summary);

/* One rank's agreement: its records' keys with the action for each. */
int cluster_agreement_send(int fd, struct cluster_sequences *seq,
			   const struct cluster_agreement_entry *entries, size_t count);

/*
 * Receives AGREEMENT chunks and calls apply for each entry as it arrives;
 * stops at the first error apply returns. 0 or a negative code with why.
 */
int cluster_agreement_recv(int fd, struct cluster_sequences *seq,
			   int (*apply)(void *ctx, const struct cluster_agreement_entry *e),
			   void *ctx, char *why, size_t why_size);

#endif
