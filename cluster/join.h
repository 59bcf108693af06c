/*
 * The join handshake (DESIGN.md section 7, PROTOCOL.md R-WIRE-15/16) on a
 * connected socket, before it becomes a link: the peer announces itself
 * (HELLO), rank zero challenges it with a fresh nonce, the peer proves it
 * holds the launch secret (PROOF: a keyed BLAKE2b MAC over both nonces, its
 * rank and fingerprint), and rank zero proves it back (WELCOME), carrying
 * the disk limit agreed by every rank. The secret never crosses the wire.
 * Every refusal names its reason on both sides (REFUSE). Synchronous: it
 * runs on the thread that connects or accepts, under the socket's timeouts.
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

/* What rank zero requires of every peer. */
struct cluster_join_policy {
	uint32_t world_size;
	struct rec_digest layout_digest;
	bool has_disk_store;
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
 * Rank zero, first half: reads HELLO, checks it against policy (world
 * size, layout digest, fingerprint = R-KEY-4 of that rank, disk store
 * presence, announced address), challenges, and verifies the PROOF. On a
 * refusal it sends REFUSE with the reason and returns SEL_EMISMATCH
 * (policy) or -EACCES (authentication or address) with why. 0 and *out
 * otherwise. Rank zero checks that ranks are not joined twice itself.
 */
int cluster_join_accept(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			const struct cluster_join_policy *policy,
			struct cluster_joiner *out, char *why, size_t why_size);

/* Rank zero, second half, once every peer is in: WELCOME with the limit. */
int cluster_join_welcome(int fd, const uint8_t secret[CLUSTER_SECRET_BYTES],
			 struct cluster_joiner *joiner, uint64_t agreed_disk_limit);

/* Rank zero refuses a joiner after the first half (e.g. a rank seen twice). */
int cluster_join_refuse(int fd, struct cluster_sequences *seq, uint32_t reason,
			const char *text);

#endif
