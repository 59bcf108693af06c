/*
 * A reference-worker trace (selene run --trace): JSON lines, one request a
 * line, blank lines skipped:
 *
 *   {"id": "chat-1", "spans": [[seed, count], ...]}
 *
 * A span is count tokens drawn deterministically from seed (launch/worker/synth.h);
 * the prompt is the spans in order. An optional "expect" object names what
 * the worker must find for that request, checked after it ran:
 *
 *   "expect": {"gpu_reused": 512, "host_reused": 0, "prefilled": 128}
 *
 * Any subset of the three keys. "settle": true makes the worker wait, before
 * that request, until every store in flight has finished (a user's think
 * time between turns), so that what the request finds does not depend on
 * disk speed. "note" holds anything (any JSON value, skipped); any other
 * key is refused, naming it and its line (a misspelt "expcet" must not
 * silently drop an expectation). Strings take every JSON escape, surrogate
 * pairs included (Python's json.dumps writes non-ASCII ids that way).
 * Every error names its line and what is wrong. This file parses; it does
 * not know what a request does.
 */
#ifndef SELENE_LAUNCH_TRACE_H
#define SELENE_LAUNCH_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on a trace, each checked before anything is allocated for it. */
#define TRACE_ID_BYTES_MAX 127u            /* a request id, in UTF-8 bytes */
#define TRACE_SPANS_MAX 4096u              /* spans in one request */
#define TRACE_TOKENS_MAX (1ull << 24)      /* tokens in one prompt: 16 Mi */
#define TRACE_REQUESTS_MAX (1u << 20)      /* lines in one trace */
#define TRACE_LINE_BYTES_MAX (1u << 20)    /* one line */
#define TRACE_DEPTH_MAX 32u                /* nesting of skipped values */

struct launch_trace_span {
	uint64_t seed;
	uint64_t count;
};

struct launch_trace_expect {
	bool has_gpu_reused, has_host_reused, has_prefilled;
	uint64_t gpu_reused, host_reused, prefilled;
};

struct launch_trace_request {
	char id[TRACE_ID_BYTES_MAX + 1];
	uint32_t line;              /* 1-based, for messages */
	uint32_t span_count;
	struct launch_trace_span *spans;   /* span_count, owned by the trace */
	uint64_t token_count;       /* the sum of the spans' counts */
	bool settle;                /* wait for stores in flight first */
	struct launch_trace_expect expect;
};

struct launch_trace {
	uint32_t request_count;
	struct launch_trace_request *requests; /* owned; launch_trace_free releases */
};

/*
 * Parses text (size bytes, not necessarily terminated) into out. Returns
 * 0, or -EINVAL with err as "line N: what", or -ENOMEM. On failure out is
 * empty (nothing to free, though launch_trace_free is harmless).
 */
int launch_trace_parse(const char *text, size_t size, struct launch_trace *out, char *err,
		       size_t err_size);

/* Reads and parses the file at path; errors name the path. */
int launch_trace_load(const char *path, struct launch_trace *out, char *err, size_t err_size);

/* Frees what a trace owns and empties it. */
void launch_trace_free(struct launch_trace *trace);

#endif
