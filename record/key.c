/*
 * Names and hashes: see key.h and FORMAT.md section "Names and hashes".
 * Every integer hashed is little-endian; BLAKE2b is libb2's.
 */
#include "record/key.h"

#include "common/base.h"
#include "common/limits.h"

#include <blake2.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char model_domain[] = "selene-model-v1";
static const char namespace_domain[] = "flare-prefix-state-v1";

/* Hashes tokens as u32 little-endian, 64 at a time through a stack buffer. */
static void hash_tokens(blake2b_state *state, const uint32_t *tokens,
			uint64_t count)
{
	uint8_t buf[REC_BLOCK_TOKENS * 4];

	while (count > 0) {
		uint64_t n = count < REC_BLOCK_TOKENS ? count : REC_BLOCK_TOKENS;

		for (uint64_t i = 0; i < n; i++)
			sel_put_le32(buf + 4 * i, tokens[i]);
		blake2b_update(state, buf, (size_t)(4 * n));
		tokens += n;
		count -= n;
	}
}

void rec_model_identity_from_name(struct rec_identity *out, const char *name)
{
	blake2b_state state;

	blake2b_init(&state, REC_IDENTITY_BYTES);
	blake2b_update(&state, (const uint8_t *)model_domain, strlen(model_domain));
	blake2b_update(&state, (const uint8_t *)name, strlen(name));
	blake2b_final(&state, out->bytes, REC_IDENTITY_BYTES);
}

void rec_namespace_identity(struct rec_identity *out,
			    const struct rec_identity *model,
			    enum rec_state_mode mode)
{
	blake2b_state state;
	uint8_t mode_byte = (uint8_t)mode;

	SEL_ASSERT(mode <= REC_STATE_COPY_SPECULATION);
	blake2b_init(&state, REC_IDENTITY_BYTES);
	blake2b_update(&state, (const uint8_t *)namespace_domain,
		       strlen(namespace_domain));
	blake2b_update(&state, model->bytes, REC_IDENTITY_BYTES);
	blake2b_update(&state, &mode_byte, 1);
	blake2b_final(&state, out->bytes, REC_IDENTITY_BYTES);
}

void rec_block_digest(struct rec_digest *out, const struct rec_identity *model,
		      const struct rec_digest *previous,
		      const uint32_t tokens[REC_BLOCK_TOKENS])
{
	blake2b_state state;

	blake2b_init_key(&state, REC_DIGEST_BYTES, model->bytes,
			 REC_IDENTITY_BYTES);
	blake2b_update(&state, previous->bytes, REC_DIGEST_BYTES);
	hash_tokens(&state, tokens, REC_BLOCK_TOKENS);
	blake2b_final(&state, out->bytes, REC_DIGEST_BYTES);
}

void rec_key_from_block(struct rec_key *out, const struct rec_identity *model,
			const struct rec_digest *block_digest, uint64_t block,
			const uint32_t *tail, uint32_t tail_count)
{
	blake2b_state state;
	uint8_t consumed_le[8];

	SEL_ASSERT(tail_count < REC_BLOCK_TOKENS);
	out->consumed = block * REC_BLOCK_TOKENS + tail_count;
	sel_put_le64(consumed_le, out->consumed);
	blake2b_init_key(&state, REC_DIGEST_BYTES, model->bytes,
			 REC_IDENTITY_BYTES);
	blake2b_update(&state, block_digest->bytes, REC_DIGEST_BYTES);
	hash_tokens(&state, tail, tail_count);
	blake2b_update(&state, consumed_le, sizeof(consumed_le));
	blake2b_final(&state, out->digest.bytes, REC_DIGEST_BYTES);
}

void rec_key_put(uint8_t *out, const struct rec_key *key)
{
	sel_put_le64(out, key->consumed);
	memcpy(out + 8, key->digest.bytes, REC_DIGEST_BYTES);
}

void rec_key_get(const uint8_t *in, struct rec_key *key)
{
	key->consumed = sel_get_le64(in);
	memcpy(key->digest.bytes, in + 8, REC_DIGEST_BYTES);
}

int rec_key_compare(const struct rec_key *a, const struct rec_key *b)
{
	if (a->consumed != b->consumed)
		return a->consumed < b->consumed ? -1 : 1;
	return memcmp(a->digest.bytes, b->digest.bytes, REC_DIGEST_BYTES);
}

bool rec_key_equal(const struct rec_key *a, const struct rec_key *b)
{
	return a->consumed == b->consumed && rec_digest_equal(&a->digest, &b->digest);
}

bool rec_digest_equal(const struct rec_digest *a, const struct rec_digest *b)
{
	return memcmp(a->bytes, b->bytes, REC_DIGEST_BYTES) == 0;
}

bool rec_digest_is_zero(const struct rec_digest *d)
{
	static const struct rec_digest zero;

	return rec_digest_equal(d, &zero);
}

int rec_history_init(struct rec_history *h, const struct rec_identity *model,
		     const uint32_t *tokens, uint64_t count)
{
	uint64_t block_count = count / REC_BLOCK_TOKENS + 1;

	memset(h, 0, sizeof(*h));
	if (count > REC_CONSUMED_MAX)
		return -EOVERFLOW;
	h->model = *model;
	h->tokens = malloc(count ? count * sizeof(uint32_t) : 1);
	h->blocks = malloc(block_count * sizeof(struct rec_digest));
	if (!h->tokens || !h->blocks) {
		rec_history_free(h);
		return -ENOMEM;
	}
	if (count)
		memcpy(h->tokens, tokens, count * sizeof(uint32_t));
	h->token_count = count;
	memset(&h->blocks[0], 0, sizeof(h->blocks[0]));
	for (uint64_t k = 1; k < block_count; k++)
		rec_block_digest(&h->blocks[k], model, &h->blocks[k - 1],
				 tokens + (k - 1) * REC_BLOCK_TOKENS);
	return 0;
}

void rec_history_free(struct rec_history *h)
{
	free(h->tokens);
	free(h->blocks);
	h->tokens = NULL;
	h->blocks = NULL;
	h->token_count = 0;
}

void rec_history_key_at(const struct rec_history *h, uint64_t consumed,
			struct rec_key *out)
{
	uint64_t block = consumed / REC_BLOCK_TOKENS;

	SEL_ASSERT(consumed > 0 && consumed <= h->token_count);
	rec_key_from_block(out, &h->model, &h->blocks[block], block,
			   h->tokens + block * REC_BLOCK_TOKENS,
			   (uint32_t)(consumed % REC_BLOCK_TOKENS));
}

const struct rec_digest *rec_history_bucket(const struct rec_history *h,
					    uint64_t consumed)
{
	SEL_ASSERT(consumed <= h->token_count);
	return &h->blocks[consumed / REC_BLOCK_TOKENS];
}
