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

/* Sends records (a scan's) as SUMMARY chunks. 0 or a negative code. */
int cluster_summary_send(int fd, struct cluster_sequences *seq,
			 const struct rec_record_info *records, size_t count);

/*
 * Receives SUMMARY chunks into a new array (caller frees *records).
 * Returns 0, SEL_EPROTO with why, SEL_ESTOPPED when the other side sent
 * REFUSE instead (its startup failed: its text in
 * why, R-WIRE-24; also for AGREEMENT below), or a negative errno.
 */
int cluster_summary_recv(int fd, struct cluster_sequences *seq,
			 struct rec_record_info **records, size_t *count, char *why,
			 size_t why_size);

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
