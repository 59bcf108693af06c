/*
 * The reference worker's synthetic model (docs/DESIGN.md section 8): tokens drawn
 * from a trace's spans, and the bytes a rank's pages and state rows hold for
 * a token prefix. Every byte is a function of (rank, plane, token prefix), so
 * a restore into any page ids can be checked byte-exact, and a page restored
 * into the wrong id, plane or rank, or from a different prefix, differs.
 * Nothing here touches a device.
 */
#ifndef SELENE_LAUNCH_SYNTH_H
#define SELENE_LAUNCH_SYNTH_H

#include "launch/worker/trace.h"

#include <stddef.h>
#include <stdint.h>

/* Token ids are drawn below this (a large model's vocabulary). */
#define SYNTH_VOCABULARY 151936u

struct launch_synth_prompt {
	uint32_t page_tokens;
	uint64_t token_count;
	uint32_t *tokens;        /* token_count */
	uint64_t full_pages;     /* token_count / page_tokens */
	uint64_t *page_hashes;   /* [i]: the prefix through the last token of page i */
};

/*
 * Builds the prompt of spans (count of them) at page_tokens per page.
 * Returns 0 or -ENOMEM; free with launch_synth_prompt_free.
 */
int launch_synth_prompt_build(struct launch_synth_prompt *p, const struct launch_trace_span *spans,
			      uint32_t count, uint32_t page_tokens);
void launch_synth_prompt_free(struct launch_synth_prompt *p);

/* The hash of the prompt's first consumed tokens (consumed <= token_count). */
uint64_t launch_synth_prefix_hash(const struct launch_synth_prompt *p, uint64_t consumed);

/* Fills out (bytes, any size) with page bytes: rank, plane, the page's hash. */
void launch_synth_page(void *out, size_t bytes, uint32_t rank, uint32_t plane,
		       uint64_t page_hash);

/* Fills out with a state row: rank and the checkpoint's prefix hash. */
void launch_synth_row(void *out, size_t bytes, uint32_t rank, uint64_t prefix_hash);

/* Fills out with bytes no page or row holds by chance (a poisoned id). */
void launch_synth_poison(void *out, size_t bytes, uint64_t salt);

#endif
