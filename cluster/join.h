/*
 * The join handshake (docs/DESIGN.md section 7, PROTOCOL.md R-WIRE-15/16) on a
 * connected socket, before it becomes a link: the peer announces itself
 * (HELLO), rank zero challenges it with a fresh nonce, the peer proves it
 * holds the launch secret (PROOF: a keyed BLAKE2b MAC over both nonces, its
 * rank and fingerprint), and rank zero proves it back (WELCOME), carrying
 * the disk limit agreed by every rank. The secret never crosses the wire.
 * Every refusal names its reason on both sides (REFUSE). The peer's side is
 * synchronous, under the socket's timeouts. Rank zero's side comes in steps
 * that a poll loop drives on non-blocking sockets (coordinator/cluster.c):
 * each frame is assembled with cluster_frame_in_read, then handed to
 * cluster_join_challenge (HELLO), cluster_join_verify (PROOF) and, once the
 * peer proved the secret, cluster_join_check (the policy). Only then may a
 * refusal be taken as the rank's word: before, the connection is a stranger.
 */
#ifndef SELENE_CLUSTER_JOIN_H
#define SELENE_CLUSTER_JOIN_H

#include "cluster/protocol.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Frame sequence numbers of each direction, carried on into the link. */
struct cluster_sequences {
	uint64_t send;
	uint64_t recv;
};

/* What a peer brings to the join. */
struct cluster_identity {
	uint32_t rank;
	uint32_t world_size;
	struct rec_digest fingerprint;
	struct rec_digest layout_digest;
	bool has_disk_store;
	uint64_t disk_limit_bytes;
	bool marked;   /* its record directory holds the cluster marker */
	uint64_t warm_bytes; /* its warm tier; 0: none */
	uint8_t warm_policy; /* enum sel_warm_policy (with a warm tier) */
};

/*
 * Peer side. Returns 0 with the agreed disk limit, or a negative code with
 * the reason in why: SEL_EMISMATCH or -EACCES when rank zero refused (its
 * reason and text in why), -EACCES when rank zero failed to prove the
 * secret, SEL_EPROTO, or an errno from the socket.
 */
int cluster_join_peer(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
		      const struct cluster_identity *me, struct cluster_sequences *seq,
		      uint64_t *agreed_disk_limit, char *why, size_t why_size);

/*
 * Peer side, when this rank failed at startup: proves the secret (HELLO,
 * CHALLENGE, PROOF), then sends REFUSE (shutdown) with failure as its text,
 * so rank zero stops the formation at once and tells every rank why.
 * Returns 0 once sent, or the handshake's failure with why.
 */
int cluster_join_peer_fail(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			   const struct cluster_identity *me, struct cluster_sequences *seq,
			   const char *failure, char *why, size_t why_size);

/* What rank zero requires of every peer. */
struct cluster_join_policy {
	uint32_t world_size;
	struct rec_digest layout_digest;
	bool has_disk_store;
	uint64_t warm_bytes; /* every rank's warm tier is this size (0: none) */
	uint8_t warm_policy; /* and has this write policy (with a warm tier) */
	/* Whether addr is one that rank announced; NULL accepts any. */
	bool (*address_allowed)(void *ctx, uint32_t rank, const struct sockaddr *addr,
				socklen_t addr_len);
	void *ctx;
};

/* A peer that passed the first half of the handshake. */
struct cluster_joiner {
	struct cluster_hello hello;
	uint8_t server_nonce[CLUSTER_NONCE_BYTES];
	struct cluster_sequences seq;
};

/*
 * Rank zero, on a HELLO's payload: decodes it into j->hello, refuses a rank
 * that is not one of world_size's peers, and sends CHALLENGE. Returns 0, or
 * a negative code with why (REFUSE sent where the frame was understood).
 */
int cluster_join_challenge(int fd, const uint8_t *payload, uint32_t length,
			   uint32_t world_size, struct cluster_joiner *j, char *why,
			   size_t why_size);

/*
 * Rank zero, on a PROOF's payload: verifies the peer's MAC (R-WIRE-16).
 * Returns 0, -EACCES after sending REFUSE (auth), or SEL_EPROTO.
 */
int cluster_join_verify(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			struct cluster_joiner *j, const uint8_t *payload, uint32_t length,
			char *why, size_t why_size);

/*
 * Rank zero, once j proved the secret: checks its HELLO against policy
 * (world size, layout digest, fingerprint = R-KEY-4 of that rank, disk
 * store presence, announced address). On a refusal sends REFUSE with the
 * reason and returns SEL_EMISMATCH (policy) or -EACCES (address) with why.
 */
int cluster_join_check(int fd, const struct cluster_join_policy *policy,
		       struct cluster_joiner *j, char *why, size_t why_size);

/*
 * Rank zero, blocking, for one connection: HELLO, CHALLENGE, PROOF and the
 * policy, as the steps above. 0 and *out, or the first step's failure.
 * Rank zero checks that ranks are not joined twice itself.
 */
int cluster_join_accept(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			const struct cluster_join_policy *policy,
			struct cluster_joiner *out, char *why, size_t why_size);

/* The largest frame of the join: a REFUSE with the longest text. */
#define CLUSTER_JOIN_FRAME_BYTES_MAX                                           \
	(CLUSTER_FRAME_HEADER_BYTES + CLUSTER_REFUSE_BYTES_MIN + CLUSTER_REFUSE_TEXT_BYTES_MAX)

/* A join frame being assembled from a non-blocking socket. Zero it to start. */
struct cluster_frame_in {
	uint8_t bytes[CLUSTER_JOIN_FRAME_BYTES_MAX]; /* header, then payload */
	uint32_t used;
	struct cluster_frame_header header;
};

/*
 * Reads what fd has of the next frame without waiting. Returns 1 when the
 * whole frame is in (in->header; payload at in->bytes +
 * CLUSTER_FRAME_HEADER_BYTES; its sequence checked against and advancing
 * *next_sequence; set in->used to 0 before the next), 0 when more must
 * come, -ECONNRESET at end of file before the frame's first byte, SEL_EPROTO
 * for a malformed frame (R-WIRE-2 .. R-WIRE-9), SEL_ETOOBIG for a payload
 * longer than any join frame, or another negative errno; why says which.
 */
int cluster_frame_in_read(int fd, struct cluster_frame_in *in, uint64_t *next_sequence,
			  char *why, size_t why_size);

/* Rank zero, second half, once every peer is in: WELCOME with the limit. */
int cluster_join_welcome(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			 struct cluster_joiner *joiner, uint64_t agreed_disk_limit);

/* Rank zero refuses a joiner after the first half (e.g. a rank seen twice). */
int cluster_join_refuse(int fd, struct cluster_sequences *seq, uint32_t reason,
			const char *text);

/*
 * Loads a secret file (the launch secret, a pool secret): exactly 32 bytes in
 * a regular file that neither group nor others may read or write, opened
 * without blocking (a FIFO is refused, not waited on). what names it in the
 * reason ("SELENE_SECRET_FILE"). Returns 0, or -EINVAL with the reason.
 */
int cluster_secret_load(const char *path, const char *what,
			uint8_t secret[CLUSTER_SECRET_BYTES], char *why, size_t why_size);

#endif
