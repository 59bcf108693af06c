/*
 * Names and hashes, byte-exact as docs/DESIGN.md section 3 (FORMAT.md R-KEY-*):
 * model and namespace identities, the 64-token block chain, prefix keys and
 * their buckets, and the prefix history that makes key_at cheap. Pure
 * functions over bytes; no files, no devices.
 */
#ifndef SELENE_RECORD_KEY_H
#define SELENE_RECORD_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REC_IDENTITY_BYTES 32u
#define REC_DIGEST_BYTES 16u
#define REC_BLOCK_TOKENS 64u

enum rec_state_mode {
	REC_STATE_ORDINARY = 0,
	REC_STATE_LEARNED_SPECULATION = 1,
	REC_STATE_COPY_SPECULATION = 2,
};

struct rec_identity {
	uint8_t bytes[REC_IDENTITY_BYTES];
};

struct rec_digest {
	uint8_t bytes[REC_DIGEST_BYTES];
};

/* A prefix key: the consumed token count and the digest of that prefix. */
struct rec_key {
	uint64_t consumed;
	struct rec_digest digest;
};

/* R-KEY-1: BLAKE2b-256("selene-model-v1" || name). */
void rec_model_identity_from_name(struct rec_identity *out, const char *name);

/* R-KEY-2: BLAKE2b-256("flare-prefix-state-v1" || model || u8 mode). */
void rec_namespace_identity(struct rec_identity *out,
			    const struct rec_identity *model,
			    enum rec_state_mode mode);

/* R-KEY-5: d(k) from d(k-1) and the block's 64 tokens. */
void rec_block_digest(struct rec_digest *out, const struct rec_identity *model,
		      const struct rec_digest *previous,
		      const uint32_t tokens[REC_BLOCK_TOKENS]);

/*
 * R-KEY-6: the key at consumed count block * 64 + tail_count, from the
 * block's digest d(block) and the tail_count (< 64) tokens after it.
 */
void rec_key_from_block(struct rec_key *out, const struct rec_identity *model,
			const struct rec_digest *block_digest, uint64_t block,
			const uint32_t *tail, uint32_t tail_count);

bool rec_key_equal(const struct rec_key *a, const struct rec_key *b);
/* Keys' order: by consumed, then digest bytes; <0, 0 or >0 as memcmp. */
int rec_key_compare(const struct rec_key *a, const struct rec_key *b);

/*
 * A key as bytes, as every layout that holds one lays it out (the wire's
 * keys, cluster/PROTOCOL.md; the scan cache, R-DIR-10): u64 consumed,
 * little-endian, then the digest.
 */
#define REC_KEY_BYTES (8 + REC_DIGEST_BYTES)
void rec_key_put(uint8_t *out, const struct rec_key *key);
void rec_key_get(const uint8_t *in, struct rec_key *key);
bool rec_digest_equal(const struct rec_digest *a, const struct rec_digest *b);
bool rec_digest_is_zero(const struct rec_digest *d);

/*
 * A token sequence with its block digests d(0) .. d(count / 64), computed
 * once, so key_at(c) costs one hash of at most 64 tokens.
 */
struct rec_history {
	struct rec_identity model;
	uint32_t *tokens;              /* owned copy, token_count entries */
	uint64_t token_count;
	struct rec_digest *blocks;     /* owned, token_count / 64 + 1 entries */
};

/*
 * Builds a history of count tokens (copied; the caller keeps tokens).
 * Returns 0, -ENOMEM, or -EOVERFLOW past REC_CONSUMED_MAX tokens. Free
 * with rec_history_free().
 */
int rec_history_init(struct rec_history *h, const struct rec_identity *model,
		     const uint32_t *tokens, uint64_t count);

/* Frees what rec_history_init allocated; a zeroed history is fine too. */
void rec_history_free(struct rec_history *h);

/* The key at consumed count c, 0 < c <= token_count (asserted). */
void rec_history_key_at(const struct rec_history *h, uint64_t consumed,
			struct rec_key *out);

/* The bucket of consumed count c: d(floor(c / 64)). */
const struct rec_digest *rec_history_bucket(const struct rec_history *h,
					    uint64_t consumed);

#endif
