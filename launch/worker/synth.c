/*
 * The synthetic model (launch/worker/synth.h). Token i of a span is XXH64 of i under
 * the span's seed, modulo the vocabulary; page hashes chain XXH64 over each
 * page's tokens; bytes come from a xorshift64 stream seeded by a hash of
 * (kind, rank, plane, prefix hash).
 */
#include "launch/worker/synth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SYNTH_ROOT_HASH 0x53454c454e45ull /* the empty prefix */

enum synth_kind { SYNTH_PAGE = 1, SYNTH_ROW = 2, SYNTH_POISON = 3 };

static void stream_fill(void *out, size_t bytes, enum synth_kind kind, uint32_t rank,
			uint32_t plane, uint64_t hash)
{
	uint64_t key[3] = { (uint64_t)kind << 32 | rank, plane, hash };
	uint64_t x = XXH64(key, sizeof(key), 0x5e1e7e) | 1;
	uint8_t *p = out;
	size_t i = 0;

	for (; i + 8 <= bytes; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	memcpy(p + i, &x, bytes - i);
}

int launch_synth_prompt_build(struct launch_synth_prompt *p, const struct launch_trace_span *spans,
			      uint32_t count, uint32_t page_tokens)
{
	uint64_t total = 0, at = 0, h = SYNTH_ROOT_HASH;

	memset(p, 0, sizeof(*p));
	for (uint32_t s = 0; s < count; s++)
		total += spans[s].count;
	p->page_tokens = page_tokens;
	p->token_count = total;
	p->full_pages = total / page_tokens;
	p->tokens = malloc((total ? total : 1) * sizeof(*p->tokens));
	p->page_hashes = malloc((p->full_pages ? p->full_pages : 1) * sizeof(uint64_t));
	if (!p->tokens || !p->page_hashes) {
		launch_synth_prompt_free(p);
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < count; s++)
		for (uint64_t i = 0; i < spans[s].count; i++)
			p->tokens[at++] = (uint32_t)(XXH64(&i, sizeof(i), spans[s].seed) %
						     SYNTH_VOCABULARY);
	for (uint64_t i = 0; i < p->full_pages; i++) {
		h = XXH64(p->tokens + i * page_tokens, (size_t)page_tokens * sizeof(uint32_t), h);
		p->page_hashes[i] = h;
	}
	return 0;
}

void launch_synth_prompt_free(struct launch_synth_prompt *p)
{
	free(p->tokens);
	free(p->page_hashes);
	memset(p, 0, sizeof(*p));
}

uint64_t launch_synth_prefix_hash(const struct launch_synth_prompt *p, uint64_t consumed)
{
	uint64_t pages = consumed / p->page_tokens;
	uint64_t h = pages ? p->page_hashes[pages - 1] : SYNTH_ROOT_HASH;
	uint64_t tail = consumed - pages * p->page_tokens;

	h = XXH64(p->tokens + pages * p->page_tokens, (size_t)tail * sizeof(uint32_t), h);
	return XXH64(&consumed, sizeof(consumed), h);
}

void launch_synth_page(void *out, size_t bytes, uint32_t rank, uint32_t plane, uint64_t page_hash)
{
	stream_fill(out, bytes, SYNTH_PAGE, rank, plane, page_hash);
}

void launch_synth_row(void *out, size_t bytes, uint32_t rank, uint64_t prefix_hash)
{
	stream_fill(out, bytes, SYNTH_ROW, rank, 0, prefix_hash);
}

void launch_synth_poison(void *out, size_t bytes, uint64_t salt)
{
	stream_fill(out, bytes, SYNTH_POISON, 0, 0, salt);
}
